// CXX
// OURS-ONLY: LLVM 22 drops `always` at a declare mapper (its mapper functions decay to/from but not the modifier): neither copy below happens there
// EXPECT: before: tag=1 p=0 0
// EXPECT: always from: tag=101 p=10 13
// EXPECT: always to: tag=7 p=70 73
// EXPECT: update: tag=8 p=80 83
// `always` reaches every entry a declare mapper pushes: map(always, from: s)
// on a target region and map(always, to: s) on target enter data copy the
// struct and its pointee although both are present.
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
