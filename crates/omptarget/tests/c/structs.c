// ENV: LIBOMPTARGET_INFO=-1
// COMPARE-STDERR
// struct members, pointer attachment, partial struct maps
#include <stdio.h>
#include <stdlib.h>
struct S { int a; double b; int *p; int n; };
int main(void) {
  struct S s = {1, 2.0, NULL, 4};
  s.p = malloc(4 * sizeof(int));
  for (int i = 0; i < 4; i++) s.p[i] = i;
#pragma omp target map(tofrom : s.a, s.b)
  { s.a += 1; s.b *= 2; }
  printf("a=%d b=%.1f\n", s.a, s.b);
#pragma omp target map(tofrom : s) map(tofrom : s.p[0 : 4])
  { for (int i = 0; i < 4; i++) s.p[i] += 10; s.n = 5; }
  printf("p=%d %d %d %d n=%d p_unchanged=%d\n", s.p[0], s.p[1], s.p[2], s.p[3], s.n, s.p != NULL);
  int *q = malloc(8 * sizeof(int));
  for (int i = 0; i < 8; i++) q[i] = i;
#pragma omp target enter data map(to : q[2 : 4])
#pragma omp target map(tofrom : q[2 : 4])
  for (int i = 2; i < 6; i++) q[i] *= 3;
#pragma omp target exit data map(from : q[2 : 4])
  for (int i = 0; i < 8; i++) printf("%d ", q[i]);
  printf("\n");
  free(q);
  free(s.p);
  return 0;
}
