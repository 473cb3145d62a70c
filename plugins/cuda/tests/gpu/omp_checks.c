/* OpenMP target regions whose printed results must be the same on a GPU
 * and in host fallback: scripts/gpu-tests.sh runs this program (built
 * with `offload clang-flags --offload-arch=sm_90`) three times and compares
 * the output: OMP_TARGET_OFFLOAD=DISABLED (host fallback), and
 * OMP_TARGET_OFFLOAD=MANDATORY on our libomptarget and on LLVM 22's.
 *
 *   omp_checks --expect-device   every region must run on a device
 *   omp_checks --expect-host     every region must run on the host
 *
 * Every value printed is exact (integers, or doubles holding integers
 * below 2^53), so the order in which teams combine does not show. It
 * covers: SPMD loops, teams reductions (+, max, min; double, int, long;
 * two at once; many teams and few), generic-mode `teams distribute` with
 * a nested `parallel for`, dynamic schedules with atomics, critical,
 * declare target functions and globals with `target update`,
 * firstprivate scalars, a region of a single thread, a parallel region in
 * a plain target region (barrier, single, master), tasks, simd, and
 * printf on the device. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N (1 << 20)

#pragma omp declare target
int dev_counter;
static int square(int x) { return x * x; }
#pragma omp end declare target

static double a[N], b[N];
static int where_failed;

/* Where the region ran: 1 on the host. Collected, not printed. */
static void note(int initial, int expect_device, int expect_host, const char *what) {
  if ((expect_device && initial) || (expect_host && !initial)) {
    fprintf(stderr, "omp_checks: '%s' ran on the %s\n", what, initial ? "host" : "device");
    where_failed = 1;
  }
}

int main(int argc, char **argv) {
  int expect_device = argc > 1 && !strcmp(argv[1], "--expect-device");
  int expect_host = argc > 1 && !strcmp(argv[1], "--expect-host");
  int initial = 1;
  /* Line by line: a crash on the device must not lose what came before. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 0; i < N; i++) {
    a[i] = i % 17;
    b[i] = 1.0;
  }

  /* SPMD: target teams distribute parallel for. */
#pragma omp target teams distribute parallel for map(to : a[0 : N]) map(tofrom : b[0 : N])
  for (int i = 0; i < N; i++)
    b[i] = 2.0 * a[i] + b[i];
  double check = 0;
  for (int i = 0; i < N; i++)
    check += b[i];
  printf("saxpy checksum %.1f\n", check);

#pragma omp target map(from : initial)
  initial = omp_is_initial_device();
  note(initial, expect_device, expect_host, "target");

  /* Teams reductions: the launch environment and reduction buffer. */
  double sum = 0;
#pragma omp target teams distribute parallel for reduction(+ : sum) map(to : a[0 : N])
  for (int i = 0; i < N; i++)
    sum += a[i];
  printf("sum %.1f\n", sum);

  int mx = -1, mn = 1 << 30;
#pragma omp target teams distribute parallel for reduction(max : mx) reduction(min : mn) map(to : a[0 : N])
  for (int i = 0; i < N; i++) {
    int v = (int)a[i] * 3 - (i % 5);
    mx = v > mx ? v : mx;
    mn = v < mn ? v : mn;
  }
  printf("max %d min %d\n", mx, mn);

  long count = 0;
  double evens = 0;
#pragma omp target teams distribute parallel for reduction(+ : count, evens) map(to : a[0 : N])
  for (int i = 0; i < N; i++) {
    if ((int)a[i] % 2 == 0) {
      count++;
      evens += a[i];
    }
  }
  printf("evens %ld sum %.1f\n", count, evens);

  /* Many teams of few threads, and one team. */
  long tri = 0;
#pragma omp target teams distribute parallel for num_teams(1000) thread_limit(32) reduction(+ : tri)
  for (int i = 0; i < 1000000; i++)
    tri += i;
  printf("triangle %ld\n", tri);
  long one = 0;
#pragma omp target teams distribute parallel for num_teams(1) reduction(+ : one)
  for (int i = 0; i < 4096; i++)
    one += i & 7;
  printf("one team %ld\n", one);

  /* Generic mode: a team per distribute iteration, a nested parallel loop. */
  long rows[64];
#pragma omp target teams distribute map(from : rows[0 : 64]) thread_limit(96)
  for (int r = 0; r < 64; r++) {
    long acc = 0;
#pragma omp parallel for reduction(+ : acc)
    for (int c = 0; c < 1000; c++)
      acc += (long)r * c;
    rows[r] = acc;
  }
  long rows_sum = 0;
  for (int r = 0; r < 64; r++)
    rows_sum += rows[r] * (r + 1);
  printf("generic rows %ld %ld %ld\n", rows[1], rows[63], rows_sum);

  /* Dynamic schedule, atomics, critical. */
  int hist[17] = {0};
  int crit = 0;
#pragma omp target teams distribute parallel for schedule(dynamic, 7) map(to : a[0 : N]) map(tofrom : hist[0 : 17], crit)
  for (int i = 0; i < N; i++) {
#pragma omp atomic
    hist[(int)a[i]]++;
    if (i % 100000 == 0) {
#pragma omp critical
      crit += i / 100000;
    }
  }
  printf("hist %d %d %d critical %d\n", hist[0], hist[8], hist[16], crit);

  /* Declare target function and global, target update, firstprivate. */
  int base = 12, sq = 0;
  dev_counter = 5;
#pragma omp target update to(dev_counter)
#pragma omp target map(from : sq) firstprivate(base)
  {
    sq = square(base);
    dev_counter += sq;
  }
#pragma omp target update from(dev_counter)
  printf("square %d counter %d\n", sq, dev_counter);

  /* Device memory routines with a region over it. */
  int dev = omp_get_default_device();
  int host = omp_get_initial_device();
  int target_dev = initial ? host : dev;
  double *d = omp_target_alloc(1000 * sizeof(double), target_dev);
  double filled = 0;
  if (d) {
#pragma omp target teams distribute parallel for is_device_ptr(d) device(target_dev)
    for (int i = 0; i < 1000; i++)
      d[i] = i * 0.5;
#pragma omp target teams distribute parallel for is_device_ptr(d) reduction(+ : filled) device(target_dev)
    for (int i = 0; i < 1000; i++)
      filled += d[i];
    omp_target_free(d, target_dev);
  }
  printf("device memory %.1f\n", filled);

  /* A parallel region in a plain target region (generic mode): barrier,
   * single, master. */
  int team_size = 0, arrivals = 0, singles = 0, masters = 0, broken = 0;
#pragma omp target map(tofrom : team_size, arrivals, singles, masters, broken)
  {
#pragma omp parallel num_threads(64)
    {
#pragma omp atomic
      arrivals++;
#pragma omp barrier
      int seen;
#pragma omp atomic read
      seen = arrivals;
      if (seen != omp_get_num_threads()) {
#pragma omp atomic write
        broken = 1;
      }
#pragma omp single
      {
        singles++;
        team_size = omp_get_num_threads();
      }
#pragma omp master
      masters++;
    }
  }
  printf("parallel: arrivals %s team size, singles %d masters %d barrier %s\n",
         arrivals == team_size ? "==" : "!=", singles, masters, broken ? "broken" : "ok");

  /* Tasks created by one thread of a parallel region, and a taskwait. */
  int tasks_sum = 0;
#pragma omp target map(tofrom : tasks_sum)
  {
#pragma omp parallel num_threads(32)
#pragma omp single
    {
      for (int i = 0; i < 10; i++) {
#pragma omp task firstprivate(i) shared(tasks_sum)
        {
#pragma omp atomic
          tasks_sum += i;
        }
      }
#pragma omp taskwait
    }
  }
  printf("tasks %d\n", tasks_sum);

  /* simd inside the combined construct, with a reduction. */
  double dot = 0;
#pragma omp target teams distribute parallel for simd reduction(+ : dot) map(to : a[0 : N])
  for (int i = 0; i < N; i++)
    dot += a[i] * a[i];
  printf("simd dot %.1f\n", dot);

  /* printf on the device, between host lines. */
  fflush(stdout);
#pragma omp target
  printf("device printf %d %s\n", 42, "ok");
  fflush(stdout);

  if (where_failed)
    return 1;
  printf("omp_checks: done\n");
  return 0;
}
