/* Small-message MPI ring for rtm-trace's MPI overhead benchmark.
 *
 * bench_mpi ITERATIONS: after a barrier, every rank sends 8 bytes to the next rank and
 * receives 8 bytes from the previous one (even ranks send first), ITERATIONS times, then
 * meets the others at a barrier. Rank 0 prints the time per MPI_Send/MPI_Recv call:
 *   ns_per_call=N   calls_per_rank=C
 * measured with MPI_Wtime between the barriers (launch and MPI_Init not included).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 10000;
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    double out = r, in = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iterations; i++) {
        if (r % 2 == 0) {
            MPI_Send(&out, 1, MPI_DOUBLE, next, 0, MPI_COMM_WORLD);
            MPI_Recv(&in, 1, MPI_DOUBLE, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&in, 1, MPI_DOUBLE, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&out, 1, MPI_DOUBLE, next, 0, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    if (r == 0)
        printf("ns_per_call=%.1f calls_per_rank=%ld\n", (t1 - t0) * 1e9 / (2.0 * iterations),
               2 * iterations);
    MPI_Finalize();
    return 0;
}
