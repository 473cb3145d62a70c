// ENV-VARIANTS: OMP_DEFAULT_DEVICE=0 | OMP_DEFAULT_DEVICE=2 | OMP_DEFAULT_DEVICE=3 | OMP_DEFAULT_DEVICE=4
// NO-REMOTE: omp_get_device_num() inside a region asks the OpenMP runtime of the process that runs it (the server's)
// device() clauses on several devices, default device from the environment, omp_get_device_num in regions,
// per-device mapping tables, omp_set_default_device
#include <omp.h>
#include <stdio.h>
int main(void) {
  int nd = omp_get_num_devices();
  printf("num=%d default=%d initial=%d host device_num=%d\n", nd, omp_get_default_device(), omp_get_initial_device(),
         omp_get_device_num());
  int num = -1, init = -1;
#pragma omp target map(from : num, init)
  {
    num = omp_get_device_num();
    init = omp_is_initial_device();
  }
  printf("default target: device_num=%d initial=%d\n", num, init);
  for (int d = 0; d <= nd; d++) {
#pragma omp target device(d) map(from : num, init)
    {
      num = omp_get_device_num();
      init = omp_is_initial_device();
    }
    printf("device(%d): device_num=%d initial=%d\n", d, num, init);
  }
  int x[1] = {7};
#pragma omp target enter data map(to : x) device(1)
  x[0] = 8;
#pragma omp target enter data map(to : x) device(2)
  int r1 = 0, r2 = 0;
#pragma omp target map(from : r1) device(1)
  r1 = x[0];
#pragma omp target map(from : r2) device(2)
  r2 = x[0];
  printf("per-device copies: dev1=%d dev2=%d present0=%d present1=%d present3=%d\n", r1, r2,
         omp_target_is_present(x, 0), omp_target_is_present(x, 1), omp_target_is_present(x, 3));
#pragma omp target exit data map(delete : x) device(1)
#pragma omp target exit data map(delete : x) device(2)
  omp_set_default_device(3);
#pragma omp target map(from : num)
  num = omp_get_device_num();
  printf("after set_default_device(3): %d default=%d\n", num, omp_get_default_device());
  omp_set_default_device(omp_get_initial_device());
#pragma omp target map(from : num, init)
  {
    num = omp_get_device_num();
    init = omp_is_initial_device();
  }
  printf("default=initial: device_num=%d initial=%d\n", num, init);
  return 0;
}
