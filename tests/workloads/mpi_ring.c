/* MPI workload with known traffic, for rtm-trace's MPI tests.
 *
 * mpi_ring STEPS [DELAY_MS [GO_FILE]]: after MPI_Init, every rank sleeps DELAY_MS (default
 * 0; time for a tracer to attach to the running ranks), then, given GO_FILE, waits until
 * that file exists (a test creates it once its tracers are attached: no time to guess),
 * then, with N ranks, r = this rank, next = (r+1)%N, prev = (r+N-1)%N:
 *  1. STEPS blocking ring steps: MPI_Send 100 doubles to next, MPI_Recv from prev
 *     (even ranks send first).
 *  2. STEPS non-blocking steps: MPI_Irecv 10 ints from prev + MPI_Isend 10 ints to next,
 *     completed by MPI_Waitall.
 *  3. One MPI_Sendrecv of 7 chars to next, from prev.
 *  4. Rank 0 receives one message of 3 ints from every other rank with MPI_ANY_SOURCE.
 *  5. A split communicator (color rank/2, key -rank, so each pair in reverse order):
 *     one MPI_Send of 5 ints from its rank 0 to its rank 1 (world ranks 1->0 and, with 4
 *     ranks, 3->2). Then a duplicate of it, where the same send goes the same way again
 *     with 2 ints (1->0 and 3->2: 8 bytes).
 *  6. A derived datatype (MPI_Type_contiguous of 4 doubles): one send of 2 elements
 *     (64 bytes) from rank 0 to rank 1.
 *  7. Collectives on MPI_COMM_WORLD: 3 Barriers, 2 Bcasts of 16 ints from root 0,
 *     4 Allreduces of 1 double, 1 Reduce to root 1, 1 Gather, 1 Allgather, 1 Alltoall,
 *     then one each of Scatter, Gatherv and Scatterv (root 0), Allgatherv, Alltoallv,
 *     Reduce_scatter and Reduce_scatter_block, one int per rank.
 * Prints "rank R of N done sum=S" per rank; exit code 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 10;
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc > 2) usleep(atoi(argv[2]) * 1000);
    if (argc > 3)
        while (access(argv[3], F_OK) != 0) usleep(10000);
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    double d[100];
    for (int i = 0; i < 100; i++) d[i] = r + i;
    double sum = 0;

    for (int s = 0; s < steps; s++) {
        if (r % 2 == 0) {
            MPI_Send(d, 100, MPI_DOUBLE, next, 1, MPI_COMM_WORLD);
            MPI_Recv(d, 100, MPI_DOUBLE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            double tmp[100];
            MPI_Recv(tmp, 100, MPI_DOUBLE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(d, 100, MPI_DOUBLE, next, 1, MPI_COMM_WORLD);
            memcpy(d, tmp, sizeof d);
        }
        sum += d[0];
    }
    for (int s = 0; s < steps; s++) {
        int out[10], in[10];
        for (int i = 0; i < 10; i++) out[i] = r * s + i;
        MPI_Request q[2];
        MPI_Irecv(in, 10, MPI_INT, prev, 2, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(out, 10, MPI_INT, next, 2, MPI_COMM_WORLD, &q[1]);
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        sum += in[0];
    }
    char cs[7] = "abcdef", cr[7];
    MPI_Sendrecv(cs, 7, MPI_CHAR, next, 3, cr, 7, MPI_CHAR, prev, 3, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);

    int three[3] = {r, r, r};
    if (r == 0) {
        for (int i = 1; i < n; i++) {
            MPI_Status st;
            MPI_Recv(three, 3, MPI_INT, MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &st);
            sum += three[0];
        }
    } else {
        MPI_Send(three, 3, MPI_INT, 0, 4, MPI_COMM_WORLD);
    }

    MPI_Comm half, twin;
    MPI_Comm_split(MPI_COMM_WORLD, r / 2, -r, &half);
    MPI_Comm_dup(half, &twin);
    int hr, hn;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hn);
    int five[5] = {0};
    if (hn > 1) {
        if (hr == 0) MPI_Send(five, 5, MPI_INT, 1, 5, half);
        if (hr == 1) MPI_Recv(five, 5, MPI_INT, 0, 5, half, MPI_STATUS_IGNORE);
        if (hr == 0) MPI_Send(five, 2, MPI_INT, 1, 5, twin);
        if (hr == 1) MPI_Recv(five, 2, MPI_INT, 0, 5, twin, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&twin);
    MPI_Comm_free(&half);

    MPI_Datatype quad;
    MPI_Type_contiguous(4, MPI_DOUBLE, &quad);
    MPI_Type_commit(&quad);
    if (r == 0) MPI_Send(d, 2, quad, 1, 6, MPI_COMM_WORLD);
    if (r == 1) MPI_Recv(d, 2, quad, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Type_free(&quad);

    int sixteen[16] = {0};
    double x = r, y = 0;
    int *all = calloc(n, sizeof(int));
    for (int i = 0; i < 3; i++) MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) MPI_Bcast(sixteen, 16, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < 4; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Reduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, 1, MPI_COMM_WORLD);
    MPI_Gather(&r, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Allgather(&r, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    int *a2 = calloc(n, sizeof(int));
    MPI_Alltoall(all, 1, MPI_INT, a2, 1, MPI_INT, MPI_COMM_WORLD);
    int *ones = calloc(n, sizeof(int)), *displs = calloc(n, sizeof(int)), one = 0;
    for (int i = 0; i < n; i++) ones[i] = 1, displs[i] = i;
    MPI_Scatter(all, 1, MPI_INT, &one, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Gatherv(&r, 1, MPI_INT, all, ones, displs, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Scatterv(all, ones, displs, MPI_INT, &one, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Allgatherv(&r, 1, MPI_INT, all, ones, displs, MPI_INT, MPI_COMM_WORLD);
    MPI_Alltoallv(all, ones, displs, MPI_INT, a2, ones, displs, MPI_INT, MPI_COMM_WORLD);
    MPI_Reduce_scatter(all, &one, ones, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Reduce_scatter_block(all, &one, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    free(ones);
    free(displs);
    printf("rank %d of %d done sum=%.0f\n", r, n, sum + y);
    free(all);
    free(a2);
    MPI_Finalize();
    return 0;
}
