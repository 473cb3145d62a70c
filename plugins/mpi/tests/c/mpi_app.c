// An MPI+OpenMP program: it initialises and finalizes MPI itself, and its
// two application ranks talk to each other over MPI while their target
// regions run on the serving ranks' devices. The runtime must not
// initialise MPI a second time (Open MPI aborts on that), and must say
// goodbye to the serving ranks before the program's MPI_Finalize.
// Run: mpirun -np 2 ./mpi_app [single] : -np 2 offload serve --mpi
// ("single": MPI_Init, i.e. MPI_THREAD_SINGLE, for the runtime's warning.)
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  int provided = -1;
  int single = argc > 1 && strcmp(argv[1], "single") == 0;
  int rc = single ? MPI_Init(&argc, &argv)
                  : MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED,
                                    &provided);
  if (rc != MPI_SUCCESS)
    return 2;
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // One local host device, then one device per serving rank: application
  // rank r offloads to serving rank r's device.
  int nd = omp_get_num_devices();
  int dev = 1 + rank;
  long sum = 0;
  int on_host = -1;
  int a[1000];
  for (int i = 0; i < 1000; i++)
    a[i] = i + rank;
#pragma omp target map(tofrom : sum, on_host) map(to : a) device(dev)
  {
    on_host = omp_is_initial_device();
    for (int i = 0; i < 1000; i++)
      sum += a[i];
  }
  if (rank == 1) {
    MPI_Send(&sum, 1, MPI_LONG, 0, 7, MPI_COMM_WORLD);
  } else if (rank == 0) {
    long other = -1;
    MPI_Recv(&other, 1, MPI_LONG, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("devices %d, sums %ld %ld, on host %d\n", nd, sum, other, on_host);
  }
  fflush(stdout);
  if (MPI_Finalize() != MPI_SUCCESS)
    return 3;
  printf("rank %d finalized\n", rank);
  return 0;
}
