// llvm_omp_target_alloc_shared: memory both the host and device code use
// NO-REMOTE: shared memory needs one address space; the remote and MPI plugins refuse it
#include <omp.h>
#include <stdio.h>
void *llvm_omp_target_alloc_shared(size_t, int);
void llvm_omp_target_free_shared(void *, int);
int main(void) {
  int *ps = llvm_omp_target_alloc_shared(16 * sizeof(int), 0);
  printf("shared alloc ok=%d\n", ps != NULL);
  if (!ps) return 1;
  for (int i = 0; i < 16; i++) ps[i] = i;
  int sum = 0;
#pragma omp target is_device_ptr(ps) map(tofrom : sum) device(0)
  for (int i = 0; i < 16; i++) sum += ps[i];
  printf("sum=%d\n", sum);
  llvm_omp_target_free_shared(ps, 0);
  return 0;
}
