// ENV: LIBOMPTARGET_INFO=4
// COMPARE-STDERR
// declare target globals, target update, link, indirect-free function pointers
#include <stdio.h>
#pragma omp declare target
int gvar = 5;
int garr[4] = {1, 2, 3, 4};
int twice(int v) { return 2 * v; }
#pragma omp end declare target
int lvar = 9;
#pragma omp declare target link(lvar)
int main(void) {
  gvar = 42;
  int r = 0;
#pragma omp target map(from : r)
  r = gvar;
  printf("device gvar before update=%d\n", r);
#pragma omp target update to(gvar)
#pragma omp target map(from : r)
  r = twice(gvar);
  printf("device twice(gvar) after update=%d\n", r);
#pragma omp target
  { garr[1] = 20; gvar = 7; }
#pragma omp target update from(garr, gvar)
  printf("garr[1]=%d gvar=%d\n", garr[1], gvar);
#pragma omp target map(tofrom : lvar)
  lvar += 1;
  printf("lvar=%d\n", lvar);
  return 0;
}
