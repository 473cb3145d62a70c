#include <omp.h>
#include <stdio.h>
#pragma omp declare target
int gv = 3;
#pragma omp end declare target
void f(int n, double *a, double *b, long *l) {
  double s = 0; int cnt = 0;
#pragma omp target teams distribute parallel for reduction(+:s) map(to:a[:n])
  for (int i = 0; i < n; i++) s += a[i];
#pragma omp target teams distribute parallel for schedule(dynamic, 4) map(tofrom:a[:n])
  for (int i = 0; i < n; i++) a[i] += 1;
#pragma omp target teams distribute parallel for schedule(guided) map(tofrom:a[:n])
  for (long i = 0; i < n; i++) a[i] += 1;
#pragma omp target teams distribute parallel for schedule(runtime) map(tofrom:a[:n])
  for (unsigned i = 0; i < n; i++) a[i] += 1;
#pragma omp target teams distribute parallel for dist_schedule(static, 8) schedule(static,2) map(tofrom:a[:n])
  for (unsigned long i = 0; i < n; i++) a[i] += 1;
#pragma omp target teams map(tofrom:cnt,s) num_teams(4) reduction(+:cnt)
  {
    cnt += omp_get_team_num() + omp_get_num_teams() + omp_get_level() + omp_get_max_threads() + omp_get_thread_limit() + omp_is_initial_device() + omp_get_active_level() + omp_in_parallel() + omp_get_ancestor_thread_num(0) + omp_get_team_size(0) + omp_get_device_num() + omp_get_num_devices() + omp_get_dynamic() + omp_get_nested() + omp_get_max_active_levels();
    double t = omp_get_wtime() + omp_get_wtick();
    omp_set_num_threads(4);
    printf("team %d %f\n", omp_get_team_num(), t);
#pragma omp parallel reduction(+:cnt)
    {
#pragma omp critical
      cnt++;
#pragma omp single
      cnt++;
#pragma omp master
      cnt++;
#pragma omp masked
      cnt++;
#pragma omp barrier
#pragma omp for ordered
      for (int i = 0; i < 10; i++) {
#pragma omp ordered
        cnt++;
      }
#pragma omp atomic
      cnt++;
#pragma omp flush
#pragma omp for schedule(dynamic) nowait
      for (int i = 0; i < 10; i++) cnt++;
#pragma omp parallel
      { cnt += omp_get_thread_num(); }
    }
  }
#pragma omp target map(tofrom:cnt)
  {
#pragma omp task
    cnt++;
#pragma omp task depend(inout:cnt)
    cnt++;
#pragma omp taskwait
#pragma omp taskgroup
    {
#pragma omp task
      cnt++;
    }
#pragma omp taskloop
    for (int i = 0; i < 10; i++) a[i] = i;
#pragma omp taskyield
  }
#pragma omp target parallel map(tofrom:cnt)
  {
#pragma omp cancel parallel if (cnt > 100)
#pragma omp cancellation point parallel
#pragma omp for
    for (int i = 0; i < 10; i++) { if (i == 100) {
#pragma omp cancel for
      } }
  }
#pragma omp target map(tofrom:s)
  {
    int *p = (int*)llvm_omp_target_dynamic_shared_alloc();
    omp_lock_t lk; omp_init_lock(&lk); omp_set_lock(&lk); omp_unset_lock(&lk); omp_test_lock(&lk); omp_destroy_lock(&lk);
    s = p ? 1 : 0;
    s += omp_get_num_procs() + omp_get_schedule ? 0 : 0;
  }
#pragma omp target teams distribute map(tofrom:a[:n])
  for (int i = 0; i < n; i++) {
#pragma omp parallel for simd
    for (int j = 0; j < 4; j++) a[i] += j;
  }
#pragma omp target teams distribute parallel for collapse(2) reduction(max:s) reduction(*:cnt) map(tofrom:a[:n])
  for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) if (a[i*0+j] > s) s = a[j];
#pragma omp target teams loop map(tofrom:a[:n])
  for (int i = 0; i < n; i++) a[i] = i;
}
