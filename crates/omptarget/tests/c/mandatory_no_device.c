// OURS-ONLY: LLVM's runtime cannot be told to hide its devices (gpu_only.c compares the same situation with LLVM)
// NO-REMOTE: chooses its own plugins
// ENV-VARIANTS: OMP_TARGET_OFFLOAD=MANDATORY OFFLOAD_HOST_DEVICES=0 | OMP_TARGET_OFFLOAD=MANDATORY OFFLOAD_PLUGINS=remote OFFLOAD_REMOTE=127.0.0.1:1 | OMP_TARGET_OFFLOAD=MANDATORY OFFLOAD_PLUGINS=none
// EXPECT: devices=0
// EXPECT-EXIT: 134
// EXPECT-STDERR: omptarget error: Consult https://openmp.llvm.org/design/Runtimes.html for debugging options.
// EXPECT-STDERR: mandatory_no_device.c:19:1: omptarget fatal error 1: failure of target construct while offloading is mandatory
// OMP_TARGET_OFFLOAD=MANDATORY with no usable device (no host devices, a
// remote server that is not there, no plugin at all): the first construct is
// LLVM's fatal error instead of a silent host fallback.
#include <omp.h>
#include <stdio.h>
int main(void) {
  int x = 1;
  printf("devices=%d\n", omp_get_num_devices());
  fflush(stdout);
  // Even a construct for the initial device fails (LLVM's checkDevice,
  // OpenMP spec issue 2669).
#pragma omp target map(tofrom : x) device(omp_get_initial_device())
  x += 1;
  printf("x=%d\n", x);
  return 0;
}
