// collapse(2)/(3) loops, non-rectangular-free 3-D arrays, distribute + simd, thread_limit/num_teams
#include <stdio.h>
#define X 6
#define Y 5
#define Z 4
int main(void) {
  static int m[X][Y][Z];
  static double g[X][Y];
#pragma omp target teams distribute parallel for collapse(3) map(from : m)
  for (int i = 0; i < X; i++)
    for (int j = 0; j < Y; j++)
      for (int k = 0; k < Z; k++) m[i][j][k] = i * 100 + j * 10 + k;
  long s = 0;
  for (int i = 0; i < X; i++)
    for (int j = 0; j < Y; j++)
      for (int k = 0; k < Z; k++) s += m[i][j][k] * (k + 1);
  printf("m sum=%ld m[5][4][3]=%d\n", s, m[5][4][3]);
#pragma omp target teams distribute collapse(2) num_teams(3) thread_limit(8) map(tofrom : g)
  for (int i = 0; i < X; i++)
    for (int j = 0; j < Y; j++) g[i][j] = i + j * 0.5;
  double gs = 0;
#pragma omp target parallel for simd collapse(2) reduction(+ : gs) map(to : g)
  for (int i = 0; i < X; i++)
    for (int j = 0; j < Y; j++) gs += g[i][j];
  printf("gs=%.2f\n", gs);
  int lo = 2, hi = 5, step = 3, cnt = 0;
#pragma omp target teams distribute parallel for collapse(2) reduction(+ : cnt) firstprivate(lo, hi, step)
  for (int i = lo; i < hi * 10; i += step)
    for (int j = hi; j > lo; j--) cnt += i - j;
  printf("cnt=%d\n", cnt);
  int tri[8][8] = {{0}};
#pragma omp target map(tofrom : tri)
#pragma omp teams distribute
  for (int i = 0; i < 8; i++) {
#pragma omp parallel for
    for (int j = 0; j <= i; j++) tri[i][j] = i * j;
  }
  int ts = 0;
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) ts += tri[i][j];
  printf("tri sum=%d\n", ts);
  return 0;
}
