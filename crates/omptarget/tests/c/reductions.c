// teams/distribute/parallel-for reductions: scalar ops, min/max, array sections, user-defined
#include <stdio.h>
#define N 1000
typedef struct { int lo, hi; long sum; } Acc;
#pragma omp declare reduction(accum : Acc : omp_out.lo = omp_in.lo < omp_out.lo ? omp_in.lo : omp_out.lo, \
                                              omp_out.hi = omp_in.hi > omp_out.hi ? omp_in.hi : omp_out.hi, \
                                              omp_out.sum += omp_in.sum) \
    initializer(omp_priv = (Acc){1 << 30, -(1 << 30), 0})
int main(void) {
  int a[N];
  for (int i = 0; i < N; i++) a[i] = (i * 37) % 101 - 50;
  long sum = 0;
  int mn = 1 << 30, mx = -(1 << 30);
  double prod = 1.0;
  unsigned bits_and = ~0u, bits_or = 0;
  int all_pos = 1, any_big = 0;
#pragma omp target teams distribute parallel for map(to : a) reduction(+ : sum) reduction(min : mn) \
    reduction(max : mx) reduction(* : prod) reduction(& : bits_and) reduction(| : bits_or) \
    reduction(&& : all_pos) reduction(|| : any_big)
  for (int i = 0; i < N; i++) {
    sum += a[i];
    if (a[i] < mn) mn = a[i];
    if (a[i] > mx) mx = a[i];
    if (i % 100 == 0) prod *= 1.5;
    bits_and &= (unsigned)(a[i] + 64) | 0x80u;
    bits_or |= 1u << (i % 20);
    all_pos = all_pos && (a[i] > -60);
    any_big = any_big || (a[i] == 50);
  }
  printf("sum=%ld min=%d max=%d prod=%.4f and=%x or=%x all=%d any=%d\n", sum, mn, mx, prod, bits_and, bits_or,
         all_pos, any_big);
  int hist[10] = {0};
#pragma omp target teams distribute parallel for map(to : a) reduction(+ : hist[0 : 10])
  for (int i = 0; i < N; i++) hist[(a[i] + 50) / 11]++;
  for (int i = 0; i < 10; i++) printf("%d ", hist[i]);
  printf("\n");
  long part[4] = {0, 0, 0, 0};
#pragma omp target teams distribute reduction(+ : part[1 : 2]) map(to : a)
  for (int i = 0; i < N; i++) part[1 + (i & 1)] += a[i];
  printf("part=%ld %ld %ld %ld\n", part[0], part[1], part[2], part[3]);
  Acc acc = {1 << 30, -(1 << 30), 0};
#pragma omp target teams distribute parallel for reduction(accum : acc) map(to : a)
  for (int i = 0; i < N; i++) {
    if (a[i] < acc.lo) acc.lo = a[i];
    if (a[i] > acc.hi) acc.hi = a[i];
    acc.sum += a[i] * a[i];
  }
  printf("udr lo=%d hi=%d sum=%ld\n", acc.lo, acc.hi, acc.sum);
  double dot = 0;
#pragma omp target parallel for reduction(+ : dot) map(to : a)
  for (int i = 0; i < N; i++) dot += 0.5 * a[i];
  printf("dot=%.1f\n", dot);
  int cnt = 0;
#pragma omp target teams reduction(+ : cnt) num_teams(4)
  cnt += 1;
  printf("teams cnt>0=%d\n", cnt > 0);
  return 0;
}
