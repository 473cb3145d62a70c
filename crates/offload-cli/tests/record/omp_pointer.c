/* A struct whose device copy holds a device pointer (pointer attachment):
   replay must keep the recorded addresses for the kernel to find `data`. */
#include <stdio.h>
#include <stdlib.h>
struct vec { int n; double *data; };
int main(void) {
  struct vec v = {300, malloc(300 * sizeof(double))};
  for (int i = 0; i < v.n; i++) v.data[i] = i;
#pragma omp target map(to: v) map(tofrom: v.data[0:v.n])
  for (int i = 0; i < v.n; i++) v.data[i] = 2 * v.data[i] + 1;
  double sum = 0;
  for (int i = 0; i < v.n; i++) sum += v.data[i];
  printf("sum=%.0f\n", sum);
  free(v.data);
  return 0;
}
