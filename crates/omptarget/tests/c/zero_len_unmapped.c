// zero-length sections of pointers whose storage is not mapped: the kernel sees the host address (OpenMP 5.2)
#include <stdio.h>
#include <stdlib.h>
static int arr[10];
int main(void) {
  int *hp = malloc(4 * sizeof(int));
  int *endp = arr + 10;
  for (int i = 0; i < 10; i++) arr[i] = i;
  int got = -1;
#pragma omp target map(hp[0 : 0]) map(from : got)
  got = hp == NULL ? 0 : 1;
  printf("unmapped heap pointer in kernel: %s\n", got ? "non-null" : "NULL");
#pragma omp target enter data map(to : arr)
#pragma omp target map(endp[0 : 0]) map(from : got)
  got = endp == NULL ? 0 : 1;
  printf("one-past-the-end pointer in kernel: %s\n", got ? "non-null" : "NULL");
#pragma omp target exit data map(delete : arr)
  free(hp);
  return 0;
}
