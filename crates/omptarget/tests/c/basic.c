// Kernel launch, firstprivate scalars, tofrom arrays, teams loops, host fallback info.
#include <omp.h>
#include <stdio.h>
int main(void) {
  int n = 8, a[8], s = 3;
  double d = 2.5;
  char c = 7;
  for (int i = 0; i < n; i++) a[i] = i;
#pragma omp target map(tofrom : a[0 : n]) firstprivate(s, d, c)
  for (int i = 0; i < n; i++) a[i] = a[i] * s + (int)d + c;
  for (int i = 0; i < n; i++) printf("%d ", a[i]);
  printf("\n");
  long sum = 0;
#pragma omp target teams distribute parallel for reduction(+ : sum) map(to : a[0 : n])
  for (int i = 0; i < n; i++) sum += a[i];
  printf("sum=%ld\n", sum);
  int on_dev = -1;
#pragma omp target map(from : on_dev)
  on_dev = !omp_is_initial_device();
  printf("on_device=%d num_devices=%d initial=%d\n", on_dev, omp_get_num_devices(), omp_get_initial_device());
  int x = 1;
#pragma omp target device(omp_get_initial_device()) map(tofrom : x)
  x += omp_is_initial_device();
  printf("x=%d\n", x);
  return 0;
}
