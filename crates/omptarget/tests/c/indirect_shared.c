// SHARED: libind.c
// COMPARE-STDERR
// ENV-VARIANTS: LIBOMPTARGET_INFO=32 | LIBOMPTARGET_INFO=35
// declare target indirect functions defined in a shared library (and one in
// the executable), called through host function pointers in target regions
// of both; INFO shows the device function addresses being read at load.
#include <stdio.h>
typedef int (*fn_t)(int);
fn_t lib_pick(int i);
int lib_apply(int i, int v);
#pragma omp begin declare target indirect
int exe_neg(int x) { return -x; }
#pragma omp end declare target
int main(void) {
  int r[3] = {0, 0, 0};
  fn_t a = lib_pick(0), b = lib_pick(1), c = exe_neg;
#pragma omp target map(from : r)
  {
    r[0] = a(5);
    r[1] = b(5);
    r[2] = c(5);
  }
  printf("%d %d %d\n", r[0], r[1], r[2]);
  printf("lib %d %d\n", lib_apply(0, 7), lib_apply(1, 7));
  return 0;
}
