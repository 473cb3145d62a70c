/* A target region with a reduction, a mapped array and a scalar: built
   both as native code and as LLVM bitcode (-fopenmp-target-jit), and with
   a bias the device code adds (-DBIAS=...), for the JIT's replacement
   variables. */
#ifndef BIAS
#define BIAS 0.0
#endif
#include <stdio.h>
int main(void) {
  double x[1000], y[1000], sum = 0;
  for (int i = 0; i < 1000; i++) { x[i] = i; y[i] = 1000 - i; }
  double a = 2.5;
#pragma omp target teams distribute parallel for map(to: x) map(tofrom: y) reduction(+: sum)
  for (int i = 0; i < 1000; i++) {
    y[i] = a * x[i] + y[i] + BIAS;
    sum += y[i];
  }
  printf("sum=%.1f y[0]=%.1f y[999]=%.1f\n", sum, y[0], y[999]);
  return 0;
}
