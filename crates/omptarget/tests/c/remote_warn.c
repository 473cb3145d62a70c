// A plain program; c_programs.rs also runs it with a remote plugin whose
// server refuses the token or is not there (one warning line, host fallback).
#include <omp.h>
#include <stdio.h>
int main(void) {
  int x = 1;
  printf("devices=%d\n", omp_get_num_devices());
#pragma omp target map(tofrom : x)
  x += 1;
  printf("x=%d\n", x);
  return 0;
}
