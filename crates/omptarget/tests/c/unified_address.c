// requires unified_address: device pointers from omp_target_alloc passed without is_device_ptr, pointer arithmetic
#include <omp.h>
#include <stdio.h>
#pragma omp requires unified_address
int main(void) {
  int *d = omp_target_alloc(8 * sizeof(int), 0);
  int *mid = d + 4;
#pragma omp target is_device_ptr(d)
  for (int i = 0; i < 8; i++) d[i] = i * 11;
  int v = 0;
#pragma omp target map(from : v) firstprivate(mid)
  v = mid[1];
  printf("v=%d\n", v);
  int host[8];
  omp_target_memcpy(host, d, sizeof host, 0, 0, omp_get_initial_device(), 0);
  printf("host[7]=%d\n", host[7]);
  int a[4] = {1, 2, 3, 4};
  int *ap = NULL;
#pragma omp target data map(tofrom : a) use_device_addr(a)
  ap = a;
  printf("use_device_addr nonnull=%d differs=%d\n", ap != NULL, ap != a);
  omp_target_free(d, 0);
  return 0;
}
