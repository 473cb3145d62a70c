/* An OpenMP region that reads a declare-target global and writes mapped
   arrays: recorded by `offload record`, replayed by `offload replay`. */
#include <stdio.h>
#pragma omp declare target
int scale = 3;
#pragma omp end declare target
int main(void) {
  int a[512], b[512];
  for (int i = 0; i < 512; i++) a[i] = i;
#pragma omp target update to(scale)
#pragma omp target map(to: a) map(from: b)
  for (int i = 0; i < 512; i++) b[i] = a[i] * scale + 1;
  long sum = 0;
  for (int i = 0; i < 512; i++) sum += b[i];
  printf("sum=%ld\n", sum);
  return 0;
}
