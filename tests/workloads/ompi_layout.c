/* Prints the Open MPI struct offsets rtm-trace reads, from the installed internal headers
 * (libopenmpi-dev), one "name value" per line. */
#include <stddef.h>
#include <stdio.h>
#include "ompi_config.h"
#include "ompi/communicator/communicator.h"
#include "ompi/group/group.h"
#include "ompi/proc/proc.h"
#include "ompi/datatype/ompi_datatype.h"
#include "mpi.h"

int main(void) {
    printf("comm_cid %zu\n", offsetof(ompi_communicator_t, c_contextid));
    printf("comm_rank %zu\n", offsetof(ompi_communicator_t, c_my_rank));
    printf("comm_group %zu\n", offsetof(ompi_communicator_t, c_remote_group));
    printf("group_procs %zu\n", offsetof(ompi_group_t, grp_proc_pointers));
    printf("proc_vpid %zu\n", offsetof(ompi_proc_t, super.proc_name) + offsetof(opal_process_name_t, vpid));
    printf("dtype_size %zu\n", offsetof(ompi_datatype_t, super.size));
    printf("status_size %zu\n", sizeof(MPI_Status));
    printf("status_source %zu\n", offsetof(MPI_Status, MPI_SOURCE));
    printf("status_count %zu\n", offsetof(MPI_Status, _ucount));
    printf("status_count_bytes %zu\n", sizeof(((MPI_Status *)0)->_ucount));
    printf("any_source %d\n", MPI_ANY_SOURCE);
    printf("proc_null %d\n", MPI_PROC_NULL);
    return 0;
}
