// CXX
// `always` through a declare mapper, compared with LLVM 22: clang's mapper
// functions drop the modifier, so map(always, from: s) on a target region
// copies back only the struct (its member entry is the last reference),
// not the pointee, and map(always, to: s) on target enter data of a
// present s copies nothing.
#include <cstdio>
#include <cstdlib>
struct S {
  int n;
  int *p;
  int tag;
};
#pragma omp declare mapper(S s) map(s, s.p[0 : s.n])
int main() {
  S s{4, (int *)calloc(4, sizeof(int)), 1};
#pragma omp target enter data map(to : s)
  // Change the device copies only.
#pragma omp target map(alloc : s)
  {
    s.tag = 100;
    for (int i = 0; i < s.n; i++)
      s.p[i] = 10 + i;
  }
  printf("before: tag=%d p=%d %d\n", s.tag, s.p[0], s.p[3]);
#pragma omp target map(always, from : s)
  { s.tag += 1; }
  printf("always from: tag=%d p=%d %d\n", s.tag, s.p[0], s.p[3]);
  s.tag = 7;
  for (int i = 0; i < s.n; i++)
    s.p[i] = 70 + i;
#pragma omp target enter data map(always, to : s)
  int tag = 0, p0 = 0, p3 = 0;
#pragma omp target map(alloc : s) map(from : tag, p0, p3)
  {
    tag = s.tag;
    p0 = s.p[0];
    p3 = s.p[3];
  }
  printf("always to: tag=%d p=%d %d\n", tag, p0, p3);
  // target update through the mapper moves both parts as well.
#pragma omp target
  {
    s.tag = 8;
    for (int i = 0; i < s.n; i++)
      s.p[i] = 80 + i;
  }
#pragma omp target update from(s)
  printf("update: tag=%d p=%d %d\n", s.tag, s.p[0], s.p[3]);
#pragma omp target exit data map(release : s)
#pragma omp target exit data map(release : s)
  free(s.p);
  return 0;
}
