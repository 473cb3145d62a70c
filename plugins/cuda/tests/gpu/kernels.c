/* Kernels for scripts/gpu-tests.sh, compiled to PTX by clang-22:
 *   clang-22 --target=nvptx64-nvidia-cuda -march=sm_80 -Xclang -target-feature
 *            -Xclang +ptx78 -nogpulib
 *            -ffreestanding -O2 -S kernels.c -o kernels.ptx */
#include <gpuintrin.h>
__gpu_kernel void saxpy(int n, float a, const float *x, float *y) {
  int i = __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  if (i < n) y[i] = a * x[i] + y[i];
}
/* One block: each thread sums a strided slice, thread 0 adds the partial
 * sums from dynamic shared memory. */
__gpu_kernel void reduce(const int *in, int n, long long *out) {
  extern __gpu_local long long part[];
  unsigned t = __gpu_thread_id_x(), nt = __gpu_num_threads_x();
  long long s = 0;
  for (int i = (int)t; i < n; i += (int)nt) s += in[i];
  part[t] = s;
  __gpu_sync_threads();
  if (t == 0) {
    long long total = 0;
    for (unsigned i = 0; i < nt; i++) total += part[i];
    *out = total;
  }
}
/* A device global the tests find by name (cuModuleGetGlobal). */
__gpu_global int scale_table[4] = {1, 2, 3, 4};
