/* OpenMP benchmarks for scripts/gpu-tests.sh, run on the GPU through our
 * libomptarget and through LLVM 22's with the same binary:
 *
 *   omp_bench TAG [LAUNCHES]
 *
 * prints `bench CASE TAG VALUE` lines:
 *   omp_launch_sync_us  an empty `target teams distribute parallel for`
 *                       (1024 iterations, nothing mapped), launch + sync,
 *                       mean over LAUNCHES (default 20000) after 200
 *                       warm-up launches;
 *   triad_GBps          STREAM triad a = b + q * c over 2^27 doubles per
 *                       array, device-resident (omp_target_alloc +
 *                       is_device_ptr), 24 bytes an element, best of 20;
 *   reduce_GBps         sum of 2^27 doubles in one `target teams distribute
 *                       parallel for reduction(+:)`, 8 bytes an element,
 *                       best of 20.
 * Results are checked (exit 1 when wrong). The baselines are raw_saxpy's
 * launch_sync_us (the bare driver) and cuda_bench.cu (nvcc, there).
 *
 * First run on an H200 on 2026-11-27 (ours only; BENCHMARKS.md). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define ELEMS (1L << 27)
#define REPS 20

int main(int argc, char **argv) {
  const char *tag = argc > 1 ? argv[1] : "omp";
  int launches = argc > 2 ? atoi(argv[2]) : 20000;
  long elems = getenv("OMP_BENCH_ELEMS") ? atol(getenv("OMP_BENCH_ELEMS")) : ELEMS;
  int dev = omp_get_default_device();
  int n = 1024;

  for (int r = 0; r < 200; r++) {
#pragma omp target teams distribute parallel for
    for (int i = 0; i < n; i++) {
    }
  }
  double t0 = omp_get_wtime();
  for (int r = 0; r < launches; r++) {
#pragma omp target teams distribute parallel for
    for (int i = 0; i < n; i++) {
    }
  }
  double t1 = omp_get_wtime();
  printf("bench omp_launch_sync_us %s %.3f\n", tag, (t1 - t0) * 1e6 / launches);

  double *a = omp_target_alloc(elems * sizeof(double), dev);
  double *b = omp_target_alloc(elems * sizeof(double), dev);
  double *c = omp_target_alloc(elems * sizeof(double), dev);
  if (!a || !b || !c) {
    fprintf(stderr, "omp_bench: omp_target_alloc of 3 x %ld doubles failed\n", elems);
    return 1;
  }
#pragma omp target teams distribute parallel for is_device_ptr(a, b, c) device(dev)
  for (long i = 0; i < elems; i++) {
    a[i] = 0.0;
    b[i] = 1.0;
    c[i] = 2.0;
  }
  const double q = 3.0;
  double best = 1e30;
  for (int r = 0; r < REPS; r++) {
    double s = omp_get_wtime();
#pragma omp target teams distribute parallel for is_device_ptr(a, b, c) device(dev)
    for (long i = 0; i < elems; i++)
      a[i] = b[i] + q * c[i];
    double e = omp_get_wtime() - s;
    best = e < best ? e : best;
  }
  double ends[2];
  omp_target_memcpy(&ends[0], a, sizeof(double), 0, 0, omp_get_initial_device(), dev);
  omp_target_memcpy(&ends[1], a, sizeof(double), 0, (elems - 1) * sizeof(double),
                    omp_get_initial_device(), dev);
  if (ends[0] != 7.0 || ends[1] != 7.0) {
    fprintf(stderr, "omp_bench: triad gave %g and %g, not 7\n", ends[0], ends[1]);
    return 1;
  }
  printf("bench triad_GBps %s %.1f\n", tag, 3.0 * sizeof(double) * elems / best / 1e9);

  best = 1e30;
  for (int r = 0; r < REPS; r++) {
    double sum = 0;
    double s = omp_get_wtime();
#pragma omp target teams distribute parallel for is_device_ptr(b) reduction(+ : sum) device(dev)
    for (long i = 0; i < elems; i++)
      sum += b[i];
    double e = omp_get_wtime() - s;
    if (sum != (double)elems) {
      fprintf(stderr, "omp_bench: reduction gave %.1f, not %ld\n", sum, elems);
      return 1;
    }
    best = e < best ? e : best;
  }
  printf("bench reduce_GBps %s %.1f\n", tag, (double)sizeof(double) * elems / best / 1e9);
  omp_target_free(a, dev);
  omp_target_free(b, dev);
  omp_target_free(c, dev);
  return 0;
}
