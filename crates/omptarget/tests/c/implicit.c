// ENV: LIBOMPTARGET_INFO=-1
// COMPARE-STDERR
// implicit maps, implicit partial overlap, zero-length sections, unmapped pointers
#include <stdio.h>
int main(void) {
  int a[8] = {0}, s = 2;
  int *p = a;
#pragma omp target data map(tofrom : a[2 : 4])
  {
#pragma omp target
    { a[3] = s; }
#pragma omp target map(p[0 : 0])
    { if (p) p[2] = 5; }
  }
  printf("a[2]=%d a[3]=%d\n", a[2], a[3]);
  return 0;
}
