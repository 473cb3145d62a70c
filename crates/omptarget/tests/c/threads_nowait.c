// many host threads + nowait target tasks with depend, mapping and launching at once
#include <omp.h>
#include <stdio.h>
#define N 64
int main(void) {
  long total = 0;
#pragma omp parallel num_threads(4) reduction(+ : total)
  {
    int tid = omp_get_thread_num();
    for (int it = 0; it < 50; it++) {
      int a[N], b[N];
      for (int i = 0; i < N; i++) a[i] = i + tid;
#pragma omp target enter data map(to : a) nowait depend(out : a)
#pragma omp target map(alloc : a) map(from : b) nowait depend(inout : a) depend(out : b)
      for (int i = 0; i < N; i++) b[i] = 2 * a[i];
#pragma omp target exit data map(release : a) nowait depend(in : a)
#pragma omp taskwait
      for (int i = 0; i < N; i++) total += b[i];
    }
  }
  printf("total=%ld\n", total);
  return 0;
}
