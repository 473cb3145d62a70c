// enter/exit/update incl. strided (non-contiguous) updates
#include <stdio.h>
int main(void) {
  int a[10], m[4][6];
  for (int i = 0; i < 10; i++) a[i] = i;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 6; j++) m[i][j] = i * 10 + j;
#pragma omp target enter data map(to : a, m)
#pragma omp target
  {
    for (int i = 0; i < 10; i++) a[i] += 100;
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 6; j++) m[i][j] += 1000;
  }
#pragma omp target update from(a[0 : 5 : 2])
#pragma omp target update from(m[0 : 2 : 2][1 : 2 : 3])
  for (int i = 0; i < 10; i++) printf("%d ", a[i]);
  printf("\n");
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 6; j++) printf("%d ", m[i][j]);
    printf("\n");
  }
  a[1] = -1;
#pragma omp target update to(a[1 : 1])
#pragma omp target exit data map(from : a) map(release : m)
  printf("a[1]=%d a[2]=%d\n", a[1], a[2]);
  return 0;
}
