/* Launch sizes of OpenMP kernels (gpu_build.rs runs it on the fake CUDA
 * driver, which runs no device code: results are not checked here). */
#include <omp.h>
#include <stdio.h>

static void work(int i) { (void)i; }
#pragma omp declare target(work)

int main(void) {
  double sum = 0;
  int x = 0;
#pragma omp target teams distribute parallel for
  for (int i = 0; i < 128; i++)
    work(i);
#pragma omp target teams distribute parallel for
  for (int i = 0; i < 129; i++)
    work(i);
#pragma omp target teams distribute parallel for thread_limit(4)
  for (int i = 0; i < 128; i++)
    work(i);
#pragma omp target teams distribute parallel for reduction(+ : sum)
  for (int i = 0; i < (1 << 20); i++)
    sum += i;
#pragma omp target teams num_teams(7) thread_limit(64) map(tofrom : x)
  {
    if (omp_get_team_num() == 0)
      x = 1;
#pragma omp parallel
    work(omp_get_thread_num());
  }
#pragma omp target map(tofrom : x)
  x += 1;
  printf("launched 6 regions\n");
  return 0;
}
