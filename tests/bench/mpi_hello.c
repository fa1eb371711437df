/* mpi_hello.c - the trivial MPI program whose `mpirun -np 4` start-to-exit wall time
 * tests/bench/run.sh puts next to `mlsys-lab run ch01/hello-distributed --world-size 4`:
 * init, one line per rank, a barrier, finalize. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("hello from rank %d of %d\n", rank, size);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
