// requires unified_shared_memory: host pointers used directly, close forces copies, malloc'd data without maps
// NO-REMOTE: unified shared memory needs host and device to share one address space
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#pragma omp requires unified_shared_memory
int g = 3;
int main(void) {
  int n = 16;
  int *p = malloc(n * sizeof(int));
  for (int i = 0; i < n; i++) p[i] = i;
#pragma omp target
  for (int i = 0; i < n; i++) p[i] += 100;
  printf("p[3]=%d\n", p[3]);
  int x = 1;
  int *addr = NULL;
#pragma omp target map(tofrom : x) map(from : addr)
  {
    x += 1;
    addr = &x;
  }
  printf("x=%d same addr=%d\n", x, addr == &x);
  int y = 5;
#pragma omp target map(close, tofrom : y) map(from : addr)
  {
    y *= 2;
    addr = &y;
  }
  printf("close y=%d same addr=%d\n", y, addr == &y);
  int z[4] = {1, 2, 3, 4};
#pragma omp target enter data map(close, to : z)
  z[0] = 99;
#pragma omp target
  z[1] = z[0];
  printf("z0=%d z1(device saw)=%d\n", z[0], z[1]);
#pragma omp target exit data map(from : z)
  printf("after exit z1=%d\n", z[1]);
  int *d = omp_target_alloc(4 * sizeof(int), 0);
#pragma omp target is_device_ptr(d)
  for (int i = 0; i < 4; i++) d[i] = i * 3;
  printf("alloc'd read on host d[3]=%d\n", d[3]);
  omp_target_free(d, 0);
#pragma omp target
  g += 10;
  printf("g=%d\n", g);
  printf("present p=%d\n", omp_target_is_present(p, 0));
  free(p);
  return 0;
}
