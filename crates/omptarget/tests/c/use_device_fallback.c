// use_device_ptr / use_device_addr of storage that is not mapped: OpenMP 5.1 keeps the host address
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  int *p = malloc(4 * sizeof(int)), y = 0, arr[4];
  int *u = (int *)1, *v = (int *)1, *w = (int *)1;
#pragma omp target data map(to : y) use_device_ptr(p)
  u = p;
#pragma omp target data map(to : y) use_device_addr(p[2], arr)
  {
    v = &p[2];
    w = arr;
  }
  printf("use_device_ptr(p): %s\n", u == p ? "host" : u ? "other" : "NULL");
  printf("use_device_addr(p[2]): %s\n", v == p + 2 ? "host" : v ? "other" : "NULL");
  printf("use_device_addr(arr): %s\n", w == arr ? "host" : w ? "other" : "NULL");
  free(p);
  return 0;
}
