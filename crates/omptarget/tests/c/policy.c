// ENV-VARIANTS: OMP_TARGET_OFFLOAD=DISABLED | OMP_TARGET_OFFLOAD=MANDATORY | OMP_DEFAULT_DEVICE=4
#include <omp.h>
#include <stdio.h>
int main(void) {
  int x = 0, on_host = -1;
#pragma omp target map(tofrom : x, on_host)
  { x++; on_host = omp_is_initial_device(); }
  printf("x=%d on_host=%d num=%d initial=%d\n", x, on_host, omp_get_num_devices(), omp_get_initial_device());
  return 0;
}
