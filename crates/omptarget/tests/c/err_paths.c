// ARGS: 1 2 3 4 5 6 7 11 12
// ENV-VARIANTS: OMP_TARGET_OFFLOAD=DEFAULT | OMP_TARGET_OFFLOAD=DISABLED
// more error paths: present/extension in target data, enter data, update; bad devices in data constructs and APIs
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static int a[16], b[8];
int main(int argc, char **argv) {
  int c = argc > 1 ? atoi(argv[1]) : 0;
  int x = 1;
  int dneg = -7 * (argc > 0);
  printf("case %d start\n", c);
  fflush(stdout);
  switch (c) {
  case 1: {
#pragma omp target data map(present, to : a)
    x = 2;
    break;
  }
  case 2: {
#pragma omp target enter data map(present, to : b[0 : 4])
    break;
  }
  case 3: {
#pragma omp target enter data map(to : a[0 : 8])
#pragma omp target enter data map(to : a[4 : 8])
    break;
  }
  case 4: {
#pragma omp target enter data map(to : a[4 : 4])
#pragma omp target update to(present : a[0 : 8])
    break;
  }
  case 5: {
#pragma omp target enter data map(to : a[4 : 4])
#pragma omp target update from(a[0 : 8])
    printf("update of partially mapped section ignored\n");
    break;
  }
  case 6: {
#pragma omp target enter data map(to : x) device(9)
    break;
  }
  case 7: {
#pragma omp target update to(x) device(dneg)
    break;
  }
  case 11: {
#pragma omp target data map(to : a[0 : 4])
    {
#pragma omp target data map(tofrom : a[2 : 4])
      x = 3;
    }
    break;
  }
  case 12: {
#pragma omp target enter data map(to : a[0 : 4])
#pragma omp target exit data map(present, from : a[0 : 8])
    break;
  }
  }
  printf("case %d done x=%d\n", c, x);
  return 0;
}
