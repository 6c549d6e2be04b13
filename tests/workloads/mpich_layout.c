/* Prints the MPICH handle and status facts rtm-trace relies on, from the installed mpi.h
 * (libmpich-dev), one "name value" per line. */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <mpi.h>
int main(void) {
    printf("status_size %zu\n", sizeof(MPI_Status));
    printf("status_source %zu\n", offsetof(MPI_Status, MPI_SOURCE));
    printf("status_count %zu\n", offsetof(MPI_Status, count_lo));
    printf("status_count_bytes %zu\n", sizeof(((MPI_Status *)0)->count_lo));
    printf("any_source %d\n", MPI_ANY_SOURCE);
    printf("proc_null %d\n", MPI_PROC_NULL);
    printf("status_ignore %lu\n", (unsigned long)(uintptr_t)MPI_STATUS_IGNORE);
    printf("comm_world %lu\n", (unsigned long)MPI_COMM_WORLD);
    return 0;
}
