// A serving rank dies (its kernel kills its process) while the application
// waits on it: the job must end with an error, not hang.
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
  int nd = omp_get_num_devices();
  printf("devices: %d\n", nd);
  fflush(stdout);
  int x = 0;
#pragma omp target map(tofrom : x) device(nd - 1)
  {
    x = 1;
    raise(SIGKILL);
  }
  printf("unreachable: %d\n", x);
  return 0;
}
