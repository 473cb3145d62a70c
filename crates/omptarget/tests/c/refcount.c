// ENV: LIBOMPTARGET_INFO=-1
// COMPARE-STDERR
// Dynamic and hold reference counts, always, delete, release, zero-length sections.
#include <stdio.h>
int main(void) {
  int a[4] = {1, 2, 3, 4};
  int *p = a;
#pragma omp target enter data map(to : a)
#pragma omp target enter data map(to : a)
#pragma omp target exit data map(from : a)
#pragma omp target exit data map(from : a)
#pragma omp target enter data map(to : a)
#pragma omp target enter data map(always, to : a)
#pragma omp target exit data map(delete : a)
#pragma omp target data map(ompx_hold, tofrom : a)
  {
#pragma omp target exit data map(delete : a)
#pragma omp target map(tofrom : a)
    a[0] += 10;
  }
#pragma omp target exit data map(from : a)
#pragma omp target enter data map(alloc : p[0 : 0])
#pragma omp target enter data map(to : a[1 : 2])
#pragma omp target exit data map(release : a[1 : 2])
  printf("a[0]=%d\n", a[0]);
  return 0;
}
