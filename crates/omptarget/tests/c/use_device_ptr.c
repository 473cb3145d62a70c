// use_device_ptr / use_device_addr / is_device_ptr / has_device_addr
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  int *p = malloc(16 * sizeof(int));
  int x = 3;
  for (int i = 0; i < 16; i++) p[i] = i;
  int dev = omp_get_default_device();
#pragma omp target data map(tofrom : p[0 : 16], x)
  {
    int *dp = NULL;
    int *dx = NULL;
#pragma omp target data use_device_ptr(p) use_device_addr(x)
    {
      dp = p;
      dx = &x;
    }
    printf("use_device_ptr matches mapped ptr: %d\n", dp == omp_get_mapped_ptr(p, dev));
    printf("use_device_addr matches: %d\n", dx == omp_get_mapped_ptr(&x, dev));
#pragma omp target is_device_ptr(dp)
    for (int i = 0; i < 16; i++) dp[i] *= 2;
  }
  printf("p[5]=%d\n", p[5]);
  int *d = omp_target_alloc(4 * sizeof(int), dev);
#pragma omp target has_device_addr(d[0 : 4])
  for (int i = 0; i < 4; i++) d[i] = i + 100;
  int h[4];
  omp_target_memcpy(h, d, sizeof h, 0, 0, omp_get_initial_device(), dev);
  printf("h=%d %d %d %d\n", h[0], h[1], h[2], h[3]);
  omp_target_free(d, dev);
  free(p);
  return 0;
}
