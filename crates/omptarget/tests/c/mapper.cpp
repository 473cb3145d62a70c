// CXX
// declare mapper with a pointer member, target and enter/exit data
#include <cstdio>
#include <cstdlib>
struct V { int n; double *p; };
#pragma omp declare mapper(V v) map(v, v.p[0 : v.n])
#pragma omp declare mapper(id : V v) map(v.p[0 : v.n])
int main() {
  V v{16, (double *)malloc(16 * sizeof(double))};
  for (int i = 0; i < 16; i++) v.p[i] = i;
#pragma omp target map(tofrom : v)
  for (int i = 0; i < v.n; i++) v.p[i] *= 2;
  printf("%g %g\n", v.p[3], v.p[15]);
#pragma omp target enter data map(mapper(id), to : v)
#pragma omp target map(mapper(id), alloc : v)
  for (int i = 0; i < v.n; i++) v.p[i] += 1;
#pragma omp target exit data map(mapper(id), from : v)
  printf("%g %g\n", v.p[3], v.p[15]);
  free(v.p);
  return 0;
}
