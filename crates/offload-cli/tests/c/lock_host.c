/* Host memory locked for a device: llvm_omp_target_lock_mem/unlock_mem
   (a part of a locked buffer counts one more user) and, with
   LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS, mapped buffers. Run on the fake
   CUDA driver, whose call counters this program reads; `fail` as the
   first argument makes the driver refuse the next page-locking. */
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *llvm_omp_target_lock_mem(void *ptr, size_t size, int device);
void llvm_omp_target_unlock_mem(void *ptr, int device);

#define N (1 << 16)
static double a[N];

static void *driver(const char *symbol) {
  void *h = dlopen(getenv("OFFLOAD_CUDA_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
  return h ? dlsym(h, symbol) : NULL;
}

static long calls(const char *name) {
  long (*f)(const char *) = (long (*)(const char *))driver("fake_cuda_calls");
  return f ? f(name) : -1;
}

static void counts(const char *when) {
  printf("%s: register=%ld unregister=%ld\n", when,
         calls("cuMemHostRegister_v2"), calls("cuMemHostUnregister"));
}

int main(int argc, char **argv) {
  if (argc > 5) {
    /* Never run: gives the program a device image, so the GPU is used. */
#pragma omp target
    {}
  }
  for (int i = 0; i < N; i++)
    a[i] = i;
  printf("devices=%d\n", omp_get_num_devices());
  void *p = llvm_omp_target_lock_mem(a, sizeof a, 0);
  void *q = llvm_omp_target_lock_mem(a + 8, 64, 0);
  printf("locked=%d part=%d\n", p == (void *)a, q == (void *)(a + 8));
  counts("locked twice");
  llvm_omp_target_unlock_mem(a, 0);
  counts("unlocked once");
  llvm_omp_target_unlock_mem(a + 8, 0);
  counts("unlocked twice");
  if (argc > 1 && !strcmp(argv[1], "fail")) {
    void (*fail)(const char *, int, int) =
        (void (*)(const char *, int, int))driver("fake_cuda_fail");
    fail("cuMemHostRegister_v2", 2 /* CUDA_ERROR_OUT_OF_MEMORY */, 1);
  }
#pragma omp target enter data map(to : a[0 : N]) device(0)
  counts("mapped");
#pragma omp target exit data map(from : a[0 : N]) device(0)
  counts("unmapped");
  printf("a[5]=%g\n", a[5]);
  /* Locked by the program, then mapped: the mapping is a user too, so an
     unlock while it is mapped leaves the memory locked until the unmap. */
  llvm_omp_target_lock_mem(a, sizeof a, 0);
#pragma omp target enter data map(to : a[0 : N]) device(0)
  llvm_omp_target_unlock_mem(a, 0);
  counts("locked, mapped, unlocked");
#pragma omp target exit data map(release : a[0 : N]) device(0)
  counts("unmapped again");
  return 0;
}
