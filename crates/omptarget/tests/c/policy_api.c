// ARGS: 1 2 3 4 5
// ENV-VARIANTS: OMP_TARGET_OFFLOAD=DISABLED | OMP_TARGET_OFFLOAD=MANDATORY | OMP_TARGET_OFFLOAD=DEFAULT OMP_DEFAULT_DEVICE=4
// offload policy seen through the device API and data constructs on device 0 / the default device
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int c = argc > 1 ? atoi(argv[1]) : 0;
  int host = omp_get_initial_device();
  int a[4] = {1, 2, 3, 4};
  printf("case %d num=%d initial=%d default=%d\n", c, omp_get_num_devices(), host, omp_get_default_device());
  fflush(stdout);
  switch (c) {
  case 1: {
    int *p = omp_target_alloc(16, omp_get_default_device());
    printf("alloc default nonnull=%d\n", p != NULL);
    omp_target_free(p, omp_get_default_device());
    break;
  }
  case 2: {
#pragma omp target data map(tofrom : a)
    {
      printf("present default=%d\n", omp_target_is_present(a, omp_get_default_device()));
#pragma omp target
      a[0] = 10 + omp_is_initial_device();
    }
    printf("a0=%d\n", a[0]);
    break;
  }
  case 3: {
#pragma omp target enter data map(to : a)
    printf("present host=%d\n", omp_target_is_present(a, host));
    printf("mapped host same=%d\n", omp_get_mapped_ptr(a, host) == (void *)a);
#pragma omp target exit data map(delete : a)
    break;
  }
  case 4: {
    int *p = omp_target_alloc(16, host);
    printf("host alloc nonnull=%d memcpy=%d\n", p != NULL, omp_target_memcpy(p, a, 16, 0, 0, host, host));
    printf("p[3]=%d\n", p[3]);
    omp_target_free(p, host);
    break;
  }
  case 5: {
    int r = -1;
#pragma omp target device(0) map(from : r)
    r = omp_is_initial_device();
    printf("device(0) initial=%d\n", r);
    break;
  }
  }
  printf("case %d done\n", c);
  return 0;
}
