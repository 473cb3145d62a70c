// OFFLOAD-ARCH: gfx90a
// ENV-VARIANTS: OMP_TARGET_OFFLOAD=MANDATORY | | OMP_TARGET_OFFLOAD=DISABLED
// ARGS: kernel data update
// A program built only for a GPU, on a machine without one: no device can
// run its image, so there are 0 devices (LLVM adds a plugin's devices only
// for images they can run). By default the constructs fall back to the
// host; under OMP_TARGET_OFFLOAD=MANDATORY the first one is fatal.
#include <omp.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "kernel";
  int x = 1;
  printf("devices=%d initial=%d\n", omp_get_num_devices(),
         omp_get_initial_device());
  fflush(stdout);
  if (!strcmp(what, "kernel")) {
#pragma omp target map(tofrom : x)
    x += 1;
  } else if (!strcmp(what, "data")) {
#pragma omp target enter data map(to : x)
    x += 10;
#pragma omp target exit data map(from : x)
  } else {
#pragma omp target update to(x)
    x += 100;
  }
  printf("x=%d\n", x);
  return 0;
}
