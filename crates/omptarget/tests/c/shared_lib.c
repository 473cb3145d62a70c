// SHARED: libk.c
// an executable and a shared library, each with its own target region
#include <stdio.h>
int lib_run(int v);
int main(void) {
  int r = 0;
#pragma omp target map(from : r)
  r = 11;
  printf("main=%d lib=%d\n", r, lib_run(5));
  return 0;
}
