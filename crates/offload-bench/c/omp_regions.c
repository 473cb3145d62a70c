/* OpenMP target regions as applications issue them, for the forwarding
 * benchmark (scripts/bench-forwarding.sh): the same binary runs on a local
 * host device, over the remote plugin and over the MPI plugin.
 *
 *   omp_regions CASE N
 *
 * prints `regions CASE N SECONDS US_PER_REGION CHECK`:
 *   tofrom   N regions `map(tofrom: x) x++` on one int (the 100,000-region
 *            application shape: every region maps, runs, maps back);
 *   empty    N empty `target` regions (nothing mapped);
 *   compute  N `target teams distribute parallel for` regions over a
 *            device-resident array of 2^16 doubles (`target enter data`
 *            once), 256 dependent multiply-adds per element (2^24 per
 *            region): compute-bound, what a serving rank must run at the
 *            speed of a local device.
 * One warm-up region (and the enter data) come before the timed loop.
 * The check value is verified (exit 1 when wrong). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double now(void) { return omp_get_wtime(); }

static int run_tofrom(long n, double *secs) {
  int x = 0;
#pragma omp target map(tofrom : x)
  x++;
  double t0 = now();
  for (long i = 0; i < n; i++) {
#pragma omp target map(tofrom : x)
    x++;
  }
  *secs = now() - t0;
  if (x != n + 1) {
    fprintf(stderr, "omp_regions: tofrom counted %d, not %ld\n", x, n + 1);
    return 1;
  }
  return 0;
}

static int run_empty(long n, double *secs) {
#pragma omp target
  {}
  double t0 = now();
  for (long i = 0; i < n; i++) {
#pragma omp target
    {}
  }
  *secs = now() - t0;
  return 0;
}

enum { COMPUTE_ELEMS = 1 << 16, COMPUTE_STEPS = 256 };

static int run_compute(long n, double *secs) {
  double *a = malloc(COMPUTE_ELEMS * sizeof(double));
  for (int i = 0; i < COMPUTE_ELEMS; i++)
    a[i] = 1.0;
#pragma omp target enter data map(to : a[0 : COMPUTE_ELEMS])
  double t0 = now();
  for (long r = 0; r < n; r++) {
#pragma omp target teams distribute parallel for map(alloc : a[0 : COMPUTE_ELEMS])
    for (int i = 0; i < COMPUTE_ELEMS; i++) {
      double v = a[i];
      for (int s = 0; s < COMPUTE_STEPS; s++)
        v = v * 0.999999 + 0.000001;
      a[i] = v;
    }
  }
  *secs = now() - t0;
#pragma omp target exit data map(from : a[0 : COMPUTE_ELEMS])
  /* Every element followed the same chain: equal and in (0, 1]. */
  int bad = 0;
  for (int i = 1; i < COMPUTE_ELEMS; i++)
    bad |= a[i] != a[0];
  bad |= !(a[0] > 0.0 && a[0] <= 1.0);
  free(a);
  if (bad) {
    fprintf(stderr, "omp_regions: compute gave different values\n");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: omp_regions tofrom|empty|compute N\n");
    return 2;
  }
  long n = atol(argv[2]);
  double secs = 0;
  int rc;
  if (!strcmp(argv[1], "tofrom"))
    rc = run_tofrom(n, &secs);
  else if (!strcmp(argv[1], "empty"))
    rc = run_empty(n, &secs);
  else if (!strcmp(argv[1], "compute"))
    rc = run_compute(n, &secs);
  else {
    fprintf(stderr, "omp_regions: unknown case %s\n", argv[1]);
    return 2;
  }
  if (rc == 0)
    printf("regions %s %ld %.6f %.3f\n", argv[1], n, secs, n ? secs * 1e6 / n : 0.0);
  return rc;
}
