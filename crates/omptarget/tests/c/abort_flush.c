// ARGS: 1 2
// stdout buffered before a fatal offload error is not flushed by the runtime's abort
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int c = argc > 1 ? atoi(argv[1]) : 0, x = 0;
  printf("buffered line before the failing construct\n");
  if (c == 1) {
#pragma omp target map(present, tofrom : x)
    x++;
  } else {
#pragma omp target device(7) map(tofrom : x)
    x++;
  }
  return 0;
}
