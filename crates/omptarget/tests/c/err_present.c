// ARGS: 1 2 3 4 5 7
// Error paths: present, extension, update present, exit present, bad device; implicit extension ok.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int c = atoi(argv[1]);
  int x = 1;
  int a[16] = {0};
  switch (c) {
  case 1:
#pragma omp target map(present, tofrom : x)
    x++;
    break;
  case 2: {
#pragma omp target enter data map(to : a[0 : 4])
#pragma omp target map(tofrom : a[0 : 8])
    a[0]++;
    break;
  }
  case 3: {
#pragma omp target update to(present : x)
    break;
  }
  case 4: {
#pragma omp target exit data map(present, release : x)
    break;
  }
  case 5:
#pragma omp target device(99) map(tofrom : x)
    x++;
    break;
  case 7: {
#pragma omp target enter data map(to : a[0 : 4])
#pragma omp target
    a[5] = 1;
    break;
  }
  }
  printf("case %d done x=%d\n", c, x);
  return 0;
}
