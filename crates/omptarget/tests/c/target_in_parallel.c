// target regions launched from a parallel region, from tasks, taskloop, and nested in single/sections
#include <omp.h>
#include <stdio.h>
#define T 4
#define N 32
int main(void) {
  int res[T][N];
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num();
    int *row = res[t];
#pragma omp target map(from : row[0 : N]) firstprivate(t)
    for (int i = 0; i < N; i++) row[i] = t * 1000 + i;
  }
  long s = 0;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < N; i++) s += res[t][i];
  printf("parallel sum=%ld\n", s);
  int v[8] = {0};
#pragma omp parallel num_threads(2)
#pragma omp single
  for (int k = 0; k < 8; k++) {
#pragma omp task firstprivate(k) shared(v)
    {
      int r = 0;
#pragma omp target map(from : r) firstprivate(k)
      r = k * k + (omp_is_initial_device() ? 1000 : 0);
      v[k] = r;
    }
  }
  for (int k = 0; k < 8; k++) printf("%d ", v[k]);
  printf("\n");
  int w[16] = {0};
#pragma omp parallel num_threads(2)
#pragma omp single
#pragma omp taskloop grainsize(2)
  for (int k = 0; k < 16; k++) {
#pragma omp target map(tofrom : w[k : 1])
    w[k] = k + 1;
  }
  int ws = 0;
  for (int k = 0; k < 16; k++) ws += w[k];
  printf("taskloop sum=%d\n", ws);
  int a = 0, b = 0;
#pragma omp parallel sections num_threads(2)
  {
#pragma omp section
    {
#pragma omp target map(tofrom : a)
      a += 5;
    }
#pragma omp section
    {
#pragma omp target map(tofrom : b)
      b += 7;
    }
  }
  printf("a=%d b=%d\n", a, b);
  int shared_arr[N];
  for (int i = 0; i < N; i++) shared_arr[i] = i;
#pragma omp target data map(tofrom : shared_arr)
  {
#pragma omp parallel for num_threads(4)
    for (int c = 0; c < 4; c++) {
#pragma omp target map(alloc : shared_arr) firstprivate(c)
      for (int i = c * 8; i < c * 8 + 8; i++) shared_arr[i] *= 3;
    }
  }
  printf("shared_arr[7]=%d [31]=%d present_after=%d\n", shared_arr[7], shared_arr[31],
         omp_target_is_present(shared_arr, 0));
  return 0;
}
