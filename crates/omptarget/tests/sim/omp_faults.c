/* omp_faults.c - an OpenMP program for the simulated device's injected
 * faults. MODE (argv[1]): "region" maps an array tofrom around a target
 * region; "alloc" calls omp_target_alloc; "memcpy" calls omp_target_memcpy. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#define N 64

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "region";
  int dev = omp_get_default_device();
  int a[N];
  for (int i = 0; i < N; i++) a[i] = i;
  if (!strcmp(mode, "region")) {
#pragma omp target map(tofrom : a)
    for (int i = 0; i < N; i++) a[i] += 1;
    printf("region: a[10] = %d\n", a[10]);
  } else if (!strcmp(mode, "alloc")) {
    void *p = omp_target_alloc(N * sizeof(int), dev);
    printf("first omp_target_alloc: %s\n", p ? "memory" : "NULL");
    void *q = omp_target_alloc(N * sizeof(int), dev);
    printf("second omp_target_alloc: %s\n", q ? "memory" : "NULL");
    omp_target_free(q, dev);
  } else if (!strcmp(mode, "memcpy")) {
    int *p = omp_target_alloc(N * sizeof(int), dev);
    int host = omp_get_initial_device();
    int r1 = omp_target_memcpy(p, a, sizeof a, 0, 0, dev, host);
    int r2 = omp_target_memcpy(p, a, sizeof a, 0, 0, dev, host);
    int back[N] = {0};
    int r3 = omp_target_memcpy(back, p, sizeof back, 0, 0, host, dev);
    printf("memcpy results: %s %s %s, back[5] = %d\n", r1 ? "fail" : "ok", r2 ? "fail" : "ok",
           r3 ? "fail" : "ok", back[5]);
    omp_target_free(p, dev);
  }
  return 0;
}
