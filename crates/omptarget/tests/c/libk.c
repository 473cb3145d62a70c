#include <stdio.h>
int lib_run(int v) {
  int r = 0;
#pragma omp target map(from : r)
  r = v * 3;
  return r;
}
