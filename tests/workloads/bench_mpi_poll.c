/* A polling MPI program, as many real codes are: every step each rank posts a receive
 * from the previous rank and a send to the next, then polls both requests with MPI_Test
 * until they complete, doing a little work between polls. Most MPI calls are polls.
 *
 * bench_mpi_poll STEPS: rank 0 prints the time per step and the MPI calls made:
 *   ns_per_step=N   calls_per_rank=C   checksum=S
 * measured with MPI_Wtime between two barriers.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static volatile double work;

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 2000;
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    double out = r, in = 0, sum = 0;
    long calls = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < steps; i++) {
        MPI_Request req[2];
        MPI_Irecv(&in, 1, MPI_DOUBLE, prev, 0, MPI_COMM_WORLD, &req[0]);
        MPI_Isend(&out, 1, MPI_DOUBLE, next, 0, MPI_COMM_WORLD, &req[1]);
        calls += 2;
        int done[2] = {0, 0};
        while (!done[0] || !done[1]) {
            for (int k = 0; k < 2; k++) {
                if (!done[k]) {
                    MPI_Test(&req[k], &done[k], MPI_STATUS_IGNORE);
                    calls++;
                }
            }
            for (int w = 0; w < 50; w++)
                work += w;
        }
        sum += in;
        out = in + 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    if (r == 0)
        printf("ns_per_step=%.1f calls_per_rank=%ld checksum=%.0f\n",
               (t1 - t0) * 1e9 / steps, calls, sum);
    MPI_Finalize();
    return 0;
}
