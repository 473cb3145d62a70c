/* What device code may call of libc, the device heap, and rtl_fatal.
 *
 * The heap: power-of-two size classes (32 B, 64 B, ... ), each with a
 * lock-free free list; memory comes from a bump pointer over the pool the
 * host may provide in __omp_rtl_device_memory_pool (LLVM's name and layout)
 * or, without one, over a static buffer of HEAP_STATIC_BYTES. Freed blocks
 * go back to their class's list and are reused, never split or merged. It
 * serves every team of every kernel on the device. */
#include "rtl.h"

enum {
  HEAP_STATIC_BYTES = 8 << 20,
  HEAP_HEADER = 16,  /* in front of every block: keeps user data 16-aligned */
  HEAP_MIN_SHIFT = 5, /* smallest block: 32 bytes with its header */
  HEAP_CLASSES = 32,  /* up to 32 B << 31 = 64 GiB */
  HEAP_MAGIC = 0x0b1ecafe,
};

/* Written by the host plugin at load when it has a pool for us. */
typedef struct DeviceMemoryPoolTy {
  void *Ptr;
  uint64_t Size;
} DeviceMemoryPoolTy;

__attribute__((used, retain, weak, visibility("protected")))
DeviceMemoryPoolTy __omp_rtl_device_memory_pool;

static __attribute__((aligned(HEAP_HEADER))) unsigned char heap_static[HEAP_STATIC_BYTES];
/* Bytes handed out past the first HEAP_HEADER (offset 0 means "none"). */
static uint64_t heap_used;
/* Per class: (ABA tag << 32) | (block offset / 16). */
static uint64_t heap_free_lists[HEAP_CLASSES];

typedef struct BlockHeader {
  uint32_t magic;
  uint32_t size_class;
  uint32_t next; /* free-list link: offset / 16 of the next free block */
  uint32_t unused;
} BlockHeader;

_Static_assert(sizeof(BlockHeader) == HEAP_HEADER, "block header size");

typedef struct Arena {
  unsigned char *base;
  uint64_t size;
} Arena;

static Arena arena(void) {
  Arena a = {heap_static, HEAP_STATIC_BYTES};
  uintptr_t pool = (uintptr_t)__omp_rtl_device_memory_pool.Ptr;
  uint64_t size = __omp_rtl_device_memory_pool.Size;
  uintptr_t aligned = (pool + HEAP_HEADER - 1) & ~(uintptr_t)(HEAP_HEADER - 1);
  if (pool && size > (aligned - pool) + HEAP_HEADER) {
    a.base = (unsigned char *)aligned;
    a.size = size - (aligned - pool);
  }
  return a;
}

static uint32_t size_class(uint64_t bytes) {
  uint64_t total = bytes + HEAP_HEADER;
  uint32_t shift = HEAP_MIN_SHIFT;
  while (((uint64_t)1 << shift) < total)
    shift++;
  return shift - HEAP_MIN_SHIFT;
}

static uint64_t class_bytes(uint32_t cls) { return (uint64_t)1 << (cls + HEAP_MIN_SHIFT); }

static BlockHeader *block_at(Arena a, uint32_t slot) {
  return (BlockHeader *)(a.base + (uint64_t)slot * HEAP_HEADER);
}

/* Ordering (device scope, RTL_DEVICE_ORDER): a push publishes the block's
 * `next` and everything its last owner wrote to it with a fence before its
 * compare-exchange; a pop fences after reading the head, before it reads
 * `next` or hands the block out. */
static BlockHeader *pop_free(Arena a, uint32_t cls) {
  uint64_t *head = &heap_free_lists[cls];
  uint64_t old = __scoped_atomic_load_n(head, RTL_DEVICE_ORDER(__ATOMIC_ACQUIRE),
                                        __MEMORY_SCOPE_DEVICE);
  for (;;) {
    uint32_t slot = (uint32_t)old;
    if (!slot)
      return NULL;
    plat_fence_device(); /* acquire: the push that published `slot` */
    BlockHeader *block = block_at(a, slot);
    /* A stale `next` (the block was taken meanwhile) fails the tagged CAS. */
    uint32_t next = __scoped_atomic_load_n(&block->next, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
    uint64_t fresh = ((old >> 32) + 1) << 32 | next;
    /* On success the CAS read the very value acquired above (the tag makes
     * each head value unique); on failure `old` is acquired next round. */
    if (__scoped_atomic_compare_exchange_n(head, &old, fresh, true,
                                           RTL_DEVICE_ORDER(__ATOMIC_ACQUIRE),
                                           RTL_DEVICE_ORDER(__ATOMIC_ACQUIRE),
                                           __MEMORY_SCOPE_DEVICE))
      return block;
  }
}

static void push_free(Arena a, BlockHeader *block) {
  uint64_t *head = &heap_free_lists[block->size_class];
  uint32_t slot = (uint32_t)(((unsigned char *)block - a.base) / HEAP_HEADER);
  uint64_t old = __scoped_atomic_load_n(head, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
  for (;;) {
    __scoped_atomic_store_n(&block->next, (uint32_t)old, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
    plat_fence_device(); /* release: the block and its `next` */
    uint64_t fresh = ((old >> 32) + 1) << 32 | slot;
    if (__scoped_atomic_compare_exchange_n(head, &old, fresh, true,
                                           RTL_DEVICE_ORDER(__ATOMIC_RELEASE), __ATOMIC_RELAXED,
                                           __MEMORY_SCOPE_DEVICE))
      return;
  }
}

static BlockHeader *bump(Arena a, uint32_t cls) {
  uint64_t bytes = class_bytes(cls);
  uint64_t used = __scoped_atomic_load_n(&heap_used, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
  do {
    if (HEAP_HEADER + used + bytes > a.size)
      return NULL;
  } while (!__scoped_atomic_compare_exchange_n(&heap_used, &used, used + bytes, true,
                                               __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                               __MEMORY_SCOPE_DEVICE));
  BlockHeader *block = (BlockHeader *)(a.base + HEAP_HEADER + used);
  block->size_class = cls;
  return block;
}

void *rtl_heap_alloc(uint64_t bytes) {
  uint32_t cls = size_class(bytes);
  if (cls >= HEAP_CLASSES)
    return NULL;
  Arena a = arena();
  BlockHeader *block = pop_free(a, cls);
  if (!block)
    block = bump(a, cls);
  /* Out of fresh memory: a free block of a bigger class will do. */
  for (uint32_t bigger = cls + 1; !block && bigger < HEAP_CLASSES; bigger++)
    block = pop_free(a, bigger);
  if (!block)
    return NULL;
  block->magic = HEAP_MAGIC;
  return block + 1;
}

void rtl_heap_free(void *ptr) {
  if (!ptr)
    return;
  BlockHeader *block = (BlockHeader *)ptr - 1;
  if (block->magic != HEAP_MAGIC)
    rtl_fatal("free of memory not from the device heap (or freed twice)");
  block->magic = 0;
  push_free(arena(), block);
}

/* --- libc ---------------------------------------------------------------------- */

/* Only for GPUs: the host emulation keeps the system's libc. Weak, so that a
 * program's own definition wins. */
#if RTL_DEVICE_TARGET

/* NVPTX programs get malloc/free from the CUDA driver; AMD ones from us. */
#if defined(__AMDGPU__)
__attribute__((weak)) void *malloc(size_t bytes) { return rtl_heap_alloc(bytes); }
__attribute__((weak)) void free(void *ptr) { rtl_heap_free(ptr); }
#endif

#if defined(__AMDGPU__)
/* No host print service on AMD GPUs yet: nothing is printed. */
__attribute__((weak)) int printf(const char *format, ...) { return -1; }
#endif

__attribute__((weak)) void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  for (size_t i = 0; i < n; i++)
    d[i] = s[i];
  return dst;
}

__attribute__((weak)) void *memmove(void *dst, const void *src, size_t n) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  if (d < s) {
    for (size_t i = 0; i < n; i++)
      d[i] = s[i];
  } else {
    for (size_t i = n; i > 0; i--)
      d[i - 1] = s[i - 1];
  }
  return dst;
}

__attribute__((weak)) void *memset(void *dst, int value, size_t n) {
  unsigned char *d = dst;
  for (size_t i = 0; i < n; i++)
    d[i] = (unsigned char)value;
  return dst;
}

__attribute__((weak)) int memcmp(const void *a, const void *b, size_t n) {
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    if (x[i] != y[i])
      return x[i] < y[i] ? -1 : 1;
  return 0;
}

__attribute__((weak)) size_t strlen(const char *s) {
  size_t n = 0;
  while (s[n])
    n++;
  return n;
}

__attribute__((weak)) int strcmp(const char *a, const char *b) {
  while (*a && *a == *b) {
    a++;
    b++;
  }
  return (unsigned char)*a - (unsigned char)*b;
}

/* --- failures -------------------------------------------------------------------- */

/* vprintf takes its arguments packed as a struct with natural alignment. */
typedef struct AssertArgs {
  const char *file;
  uint32_t line;
  const char *function;
  uint32_t block;
  uint32_t thread;
  const char *assertion;
} AssertArgs;

__attribute__((weak, noreturn)) void __assert_fail(const char *assertion, const char *file,
                                                   unsigned int line, const char *function) {
  AssertArgs args = {file, line, function, plat_block_id(), plat_thread_id(), assertion};
  plat_vprintf("%s:%u: %s: block %u thread %u: assertion `%s' failed.\n", &args);
  plat_trap();
}

#endif /* RTL_DEVICE_TARGET */

typedef struct FatalArgs {
  const char *what;
  uint32_t block;
  uint32_t thread;
} FatalArgs;

__attribute__((noreturn)) void rtl_fatal(const char *what) {
  FatalArgs args = {what, plat_block_id(), plat_thread_id()};
  plat_vprintf("devicertl: fatal: %s (block %u thread %u)\n", &args);
  plat_trap();
}
