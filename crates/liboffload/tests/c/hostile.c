/* hostile.c - ol* calls a careless or hostile program makes: every one must
 * return an error code (never crash, never report success for memory it
 * does not own) and leave the library usable. Argument: kernels.so. */
#include "common.h"

#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>

static ol_device_handle_t D, H;

/* A copy that worked before still works: the library is usable. */
static void still_usable(void) {
  int *p = NULL;
  int in[16], out[16];
  for (int i = 0; i < 16; i++) in[i] = i * 3;
  OK(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, sizeof in, (void **)&p));
  OK(olMemcpy(NULL, p, D, in, H, sizeof in));
  OK(olMemcpy(NULL, out, H, p, D, sizeof out));
  CHECK(memcmp(in, out, sizeof in) == 0);
  OK(olMemFree(p));
}

/* Spin (yielding) until *gate != 0. */
static void block_fn(void *ud) {
  while (!__atomic_load_n((int *)ud, __ATOMIC_ACQUIRE)) sched_yield();
}

struct add_args { int *x; int v; size_t n; };

/* olMemFree of memory that queued work (copies, a launch) still uses: the
 * free is deferred until the queue has passed that work (stream-ordered):
 * the work runs on live memory, the pointer is dead at once for new calls. */
static void free_with_work_pending(ol_queue_handle_t q, ol_symbol_handle_t add_value) {
  size_t n = (size_t)64 << 20; /* unmapped by a real free: a crash if freed early */
  size_t ints = n / sizeof(int);
  int *mem = NULL, *back = malloc(n);
  char *src = malloc(n);
  memset(src, 1, n);
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, n, (void **)&mem));
  int gate = 0;
  OK(olLaunchHostFunction(q, block_fn, &gate));
  OK(olMemcpy(q, mem, D, src, H, n));
  ol_kernel_launch_size_args_t ls = {1, {(uint32_t)(ints / 256), 1, 1}, {256, 1, 1}, 0};
  struct add_args a = {mem, 1, ints};
  OK(olLaunchKernel(q, D, add_value, &a, sizeof a, &ls));
  OK(olMemcpy(q, back, H, mem, D, n));
  OK(olMemFree(mem)); /* deferred: nothing has run yet */
  /* The pointer is dead for new work and a second free at once. */
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(mem));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(q, back, H, mem, D, 16));
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  OK(olSyncQueue(q));
  CHECK(back[0] == 0x01010102 && back[ints - 1] == 0x01010102);
  /* Freed for real once the queue passed it: memory can be had again. */
  int *again = NULL;
  OK(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, n, (void **)&again));
  OK(olMemFree(again));
  free(back);
  free(src);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  MUST(olInit());
  collect_devices();
  D = offload_device(0);
  H = host_device();
  if (!D || !H) return 2;

  char *small = NULL;
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, 64, (void **)&small));
  static char big[1 << 16];

  /* Reads and writes past the end of an allocation. */
  EXPECT(OL_ERRC_INVALID_SIZE, olMemcpy(NULL, big, H, small, D, (size_t)1 << 40));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemcpy(NULL, small, D, big, H, 4096));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemcpy(NULL, small + 60, D, big, H, 8));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemcpy(NULL, big, H, small + 1, D, 64));
  OK(olMemcpy(NULL, small + 60, D, big, H, 4)); /* the last 4 bytes: fine */
  /* Size that wraps the address space. */
  EXPECT(OL_ERRC_INVALID_SIZE, olMemcpy(NULL, small, D, big, H, SIZE_MAX));
  /* Addresses that are no allocation of the device. */
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(NULL, (void *)0x1000, D, big, H, 8));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(NULL, big, H, (void *)0x1000, D, 8));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(NULL, big, D, small, D, 8));
  /* Device to device past the end. */
  char *other = NULL;
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, 4096, (void **)&other));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemcpy(NULL, small, D, other, D, 4096));
  OK(olMemcpy(NULL, other, D, small, D, 64));

  /* The same on a queue: refused at enqueue time, queue still fine. */
  ol_queue_handle_t q;
  MUST(olCreateQueue(D, &q));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemcpy(q, small, D, big, H, 4096));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemcpy(q, big, H, small, D, (size_t)1 << 40));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(q, (void *)0x1000, D, big, H, 8));
  OK(olSyncQueue(q));
  OK(olMemcpy(q, small, D, big, H, 64));
  OK(olSyncQueue(q));

  /* Fills past the end, on a queue and without one. */
  uint32_t pat = 0xabababab;
  EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(NULL, small, sizeof pat, &pat, 4096));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(q, small, sizeof pat, &pat, 4096));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFill(q, (void *)0x1000, sizeof pat, &pat, 64));
  OK(olMemFill(q, small, sizeof pat, &pat, 64));
  OK(olSyncQueue(q));

  /* Use after free and double free. */
  char *gone = NULL;
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, 128, (void **)&gone));
  OK(olMemFree(gone));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(NULL, gone, D, big, H, 16));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(q, big, H, gone, D, 16));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(gone));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(small + 8));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(big));

  /* Registering ranges that are no memory. */
  void *pinned = NULL;
  ol_result_t r = olMemRegister(D, big, SIZE_MAX, 0, &pinned);
  CHECK(r != NULL);
  r = olMemRegister(D, (void *)UINTPTR_MAX, 16, 0, &pinned);
  CHECK(r != NULL);

  /* Kernel argument buffers and launch sizes out of range. */
  size_t ksize = 0;
  char *image = read_file(argv[1], &ksize);
  ol_program_handle_t prog;
  MUST(olCreateProgram(D, image, ksize, &prog));
  ol_symbol_handle_t add_value;
  MUST(olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_KERNEL, &add_value));
  ol_symbol_handle_t k;
  MUST(olGetSymbol(prog, "empty_kernel", OL_SYMBOL_KIND_KERNEL, &k));
  /* Only what the image itself defines: never its dependencies' symbols
   * (libc's `system` as a "kernel" would run a shell command). */
  const char *foreign[] = {"system", "dlopen", "printf", "malloc"};
  for (int i = 0; i < 4; i++) {
    ol_symbol_handle_t s = NULL;
    EXPECT(OL_ERRC_NOT_FOUND, olGetSymbol(prog, foreign[i], OL_SYMBOL_KIND_KERNEL, &s));
    EXPECT(OL_ERRC_NOT_FOUND,
           olGetSymbol(prog, foreign[i], OL_SYMBOL_KIND_GLOBAL_VARIABLE, &s));
  }
  EXPECT(OL_ERRC_NOT_FOUND, olGetSymbol(prog, "stdout", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &k));
  MUST(olGetSymbol(prog, "empty_kernel", OL_SYMBOL_KIND_KERNEL, &k));
  ol_kernel_launch_size_args_t zero = {1, {0, 1, 1}, {1, 1, 1}, 0};
  EXPECT(OL_ERRC_INVALID_SIZE, olLaunchKernel(q, D, k, NULL, 0, &zero));
  ol_kernel_launch_size_args_t huge = {1, {1, 1, 1}, {1u << 30, 1, 1}, 0};
  CHECK(olLaunchKernel(q, D, k, NULL, 0, &huge) != NULL);
  OK(olSyncQueue(q));

  /* An image larger than any program (4 GiB + 1 page of /dev/zero-like
   * pages, never touched): refused at once, not parsed or copied. */
  size_t huge_len = ((size_t)4 << 30) + 4096;
  void *zeros = mmap(NULL, huge_len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (zeros != MAP_FAILED) {
    EXPECT(OL_ERRC_INVALID_SIZE, olCreateProgram(D, zeros, huge_len, &prog));
    munmap(zeros, huge_len);
  }

  /* Truncated and garbage images. */
  EXPECT(OL_ERRC_INVALID_BINARY, olCreateProgram(D, image, 64, &prog));
  EXPECT(OL_ERRC_INVALID_BINARY, olCreateProgram(D, big, 4096, &prog));

  /* 300 single-byte mutations of the image's headers and loader tables
   * (the first page: ELF and program headers, dynamic symbols, strings,
   * hash tables, relocations; code starts after it). Each one either loads
   * or is refused; none may take the process down. */
  char *mutant = malloc(ksize);
  unsigned seed = 12345, loaded = 0, refused = 0;
  size_t limit = ksize < 4096 ? ksize : 4096;
  for (int i = 0; i < 300; i++) {
    seed = seed * 1103515245u + 12345u;
    size_t pos = (seed >> 8) % limit;
    memcpy(mutant, image, ksize);
    mutant[pos] = (char)(i % 3 == 0 ? 0x00 : i % 3 == 1 ? 0xff : mutant[pos] ^ 0x80);
    ol_program_handle_t mp;
    ol_result_t mr = olCreateProgram(D, mutant, ksize, &mp);
    if (mr) {
      CHECK(mr->Code == OL_ERRC_INVALID_BINARY);
      refused++;
    } else {
      OK(olDestroyProgram(mp));
      loaded++;
    }
  }
  printf("mutants: %u loaded, %u refused\n", loaded, refused);
  CHECK(loaded + refused == 300 && refused > 0);
  free(mutant);
  free(image);

  free_with_work_pending(q, add_value);

  OK(olDestroyQueue(q));
  OK(olMemFree(small));
  OK(olMemFree(other));
  still_usable();
  OK(olShutDown());
  return finish("hostile");
}
