// ENV: LIBOMPTARGET_INFO=32
// COMPARE-STDERR
// data-transfer INFO lines of firstprivate copies: small ones are packed into one transfer, names come from the table
#include <stdio.h>
static double big[200];
int main(void) {
  int a[3] = {1, 2, 3}, b[5] = {4, 5, 6, 7, 8};
  int r = 0;
  for (int i = 0; i < 200; i++) big[i] = i;
#pragma omp target firstprivate(a, b)
  a[0] += b[4];
#pragma omp target firstprivate(a, b, big) map(tofrom : r)
  r = a[0] + b[4] + (int)big[199];
  printf("r=%d\n", r);
  return 0;
}
