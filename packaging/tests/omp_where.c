/* omp_where.c - an OpenMP offload program run through `offload exec`:
 * computes on device 0 and prints which file provides libomptarget's entry
 * point, so the test can tell our runtime from LLVM's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>

int main(void) {
  int n = 1000;
  long sum = 0;
#pragma omp target teams distribute parallel for map(tofrom : sum) reduction(+ : sum)
  for (int i = 1; i <= n; i++)
    sum += i;
  printf("sum %ld on %d devices\n", sum, omp_get_num_devices());
  Dl_info info;
  void *entry = dlsym(RTLD_DEFAULT, "__tgt_target_kernel");
  if (entry && dladdr(entry, &info) && info.dli_fname)
    printf("libomptarget from %s\n", info.dli_fname);
  return sum == (long)n * (n + 1) / 2 ? 0 : 1;
}
