/* A fake CUDA driver (libcuda.so.1) for CI machines without a GPU.
 *
 * It implements the subset of the driver API the CUDA plugin calls, over
 * host memory:
 *
 *  - FAKE_CUDA_DEVICES (default 2) devices of compute capability
 *    FAKE_CUDA_CC (default 90: sm_90), with H100-like attributes;
 *  - one primary context per device; every call that needs a context
 *    fails with CUDA_ERROR_INVALID_CONTEXT when none is current on the
 *    calling thread, and stream operations fail when the stream belongs to
 *    another context than the current one (the plugin must make the right
 *    context current on each thread before each call);
 *  - memory from malloc (device, pinned host and managed alike), copies
 *    with memcpy, streams and events executed synchronously, host
 *    functions called at once;
 *  - cuModuleLoadDataEx keeps a copy of the image and records the JIT
 *    options; PTX containing "FAKE_INVALID_PTX" fails to "compile" with a
 *    log message; kernels are looked up in the PTX text (".entry NAME")
 *    and run as the host functions below of the same name (fake_saxpy,
 *    fake_reduce), over the grid, with the packed parameter buffer passed
 *    through cuLaunchKernel's `extra`; globals (".global ... NAME") get
 *    zeroed host memory;
 *  - a cubin (ELF64, e.g. an OpenMP program built for sm_90) is read for
 *    its symbol table: its functions are kernels whose launches do nothing,
 *    its globals host memory holding their initial bytes (so kernel
 *    environments read back as clang wrote them);
 *  - every call is counted; fake_cuda_fail(name, result, count) makes the
 *    next `count` calls of `name` return `result` (error injection);
 *  - the last launch (grid, block, shared memory, parameter bytes, the
 *    OpenMP launch environment its first word points to) and the last JIT
 *    options can be read back by tests;
 *  - PTX with an `.extern .func` it does not define fails to "link" as
 *    ptxas does ("Unresolved extern function 'NAME'"); CU_DEVICE_ATTRIBUTE
 *    39 (threads per SM) is 2048.
 *
 * Built by the tests with clang-22 into a temporary directory and loaded
 * by the plugin through OFFLOAD_CUDA_DRIVER. Nothing here unwinds: it is
 * plain C. */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef void (*CUhostFn)(void *);

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_UNKNOWN = 999,
};

#define MAX_DEVICES 8
#define MAX_GLOBALS 32
#define MAX_COUNTERS 128
#define MAX_FAILS 16

struct ctx {
  int device;
  int retained;
  size_t limits[3]; /* CU_LIMIT_STACK_SIZE, _PRINTF_FIFO_SIZE, _MALLOC_HEAP_SIZE */
};

struct stream {
  struct ctx *ctx;
};

struct event {
  int recorded;
};

struct global {
  char name[128];
  void *mem;
  size_t size;
};

struct module {
  struct ctx *ctx;
  char *image;
  size_t size;
  int is_text;
  int is_elf; /* a cubin: kernels and globals come from its symbol table */
  struct global globals[MAX_GLOBALS];
  int nglobals;
};

typedef void (*fake_kernel_fn)(const unsigned grid[3], const unsigned block[3],
                               unsigned shared, const unsigned char *args,
                               size_t size);

struct function {
  struct module *module;
  char name[128];
  fake_kernel_fn fn;
};

struct fake_launch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared;
  size_t arg_size;
  unsigned char args[1024];
  int used_extra;
  int count;
  /* The first parameter word (an OpenMP kernel's `dyn_ptr`) and, when it
   * is neither NULL nor ~0 and fake_cuda_inspect_reduction asked for it,
   * the 16 bytes of the launch environment it points to and how many of
   * the first bytes of the reduction buffer that environment names were
   * not zero, all as they were when the kernel started. */
  uint64_t dyn_ptr;
  unsigned char launch_env[16];
  long buffer_nonzero;
};

struct counter {
  char name[64];
  long calls;
};

struct fail {
  char name[64];
  int result;
  int count;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static struct ctx contexts[MAX_DEVICES];
static __thread struct ctx *current;
static struct fake_launch last_launch;
static int jit_keys[32];
static long jit_values[32];
static int jit_count;
static struct counter counters[MAX_COUNTERS];
/* Bytes of a launch's reduction buffer to inspect, and whether the "kernel"
 * then scribbles over them and the counters (as a real teams reduction
 * leaves them), so that the next launch shows whether they were zeroed. */
static size_t inspect_reduction;
static int scribble_reduction;
static struct fail fails[MAX_FAILS];

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}

static int device_count(void) {
  int n = env_int("FAKE_CUDA_DEVICES", 2);
  return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

/* Count the call, and return an injected failure if one is pending. */
static CUresult enter(const char *name) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&lock);
  int i;
  for (i = 0; i < MAX_COUNTERS && counters[i].name[0]; i++)
    if (!strcmp(counters[i].name, name))
      break;
  if (i < MAX_COUNTERS) {
    if (!counters[i].name[0])
      snprintf(counters[i].name, sizeof counters[i].name, "%s", name);
    counters[i].calls++;
  }
  for (int f = 0; f < MAX_FAILS; f++) {
    if (fails[f].count > 0 && !strcmp(fails[f].name, name)) {
      fails[f].count--;
      r = fails[f].result;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

#define ENTER(name)                                                            \
  do {                                                                         \
    CUresult injected_ = enter(name);                                          \
    if (injected_ != CUDA_SUCCESS)                                             \
      return injected_;                                                        \
  } while (0)

#define NEED_INIT()                                                            \
  do {                                                                         \
    if (!initialised)                                                          \
      return CUDA_ERROR_NOT_INITIALIZED;                                       \
  } while (0)

#define NEED_CTX()                                                             \
  do {                                                                         \
    NEED_INIT();                                                               \
    if (!current)                                                              \
      return CUDA_ERROR_INVALID_CONTEXT;                                       \
  } while (0)

/* A stream must belong to the current context. */
#define NEED_STREAM(s)                                                         \
  do {                                                                         \
    NEED_CTX();                                                                \
    if ((s) && ((struct stream *)(s))->ctx != current)                         \
      return CUDA_ERROR_INVALID_CONTEXT;                                       \
  } while (0)

/* ---- test controls (not part of the driver API) ---- */

long fake_cuda_calls(const char *name) {
  long n = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_COUNTERS && counters[i].name[0]; i++)
    if (!strcmp(counters[i].name, name))
      n = counters[i].calls;
  pthread_mutex_unlock(&lock);
  return n;
}

void fake_cuda_fail(const char *name, int result, int count) {
  pthread_mutex_lock(&lock);
  for (int f = 0; f < MAX_FAILS; f++) {
    if (fails[f].count == 0 || !strcmp(fails[f].name, name)) {
      snprintf(fails[f].name, sizeof fails[f].name, "%s", name);
      fails[f].result = result;
      fails[f].count = count;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

void fake_cuda_last_launch(struct fake_launch *out) {
  pthread_mutex_lock(&lock);
  *out = last_launch;
  pthread_mutex_unlock(&lock);
}

void fake_cuda_inspect_reduction(size_t bytes, int scribble) {
  pthread_mutex_lock(&lock);
  inspect_reduction = bytes;
  scribble_reduction = scribble;
  pthread_mutex_unlock(&lock);
}

int fake_cuda_last_jit_options(int *keys, long *values, int max) {
  pthread_mutex_lock(&lock);
  int n = jit_count < max ? jit_count : max;
  for (int i = 0; i < n; i++) {
    keys[i] = jit_keys[i];
    values[i] = jit_values[i];
  }
  pthread_mutex_unlock(&lock);
  return n;
}

/* ---- the "kernels" ---- */

/* saxpy(int n, float a, const float *x, float *y): y = a * x + y. */
static void fake_saxpy(const unsigned grid[3], const unsigned block[3],
                       unsigned shared, const unsigned char *args,
                       size_t size) {
  (void)shared;
  if (size < 24)
    return;
  int n;
  float a;
  const float *x;
  float *y;
  memcpy(&n, args, 4);
  memcpy(&a, args + 4, 4);
  memcpy(&x, args + 8, 8);
  memcpy(&y, args + 16, 8);
  unsigned long total = (unsigned long)grid[0] * block[0];
  for (unsigned long i = 0; i < total && i < (unsigned long)n; i++)
    y[i] = a * x[i] + y[i];
}

/* reduce(const int *in, int n, long long *out): *out = sum of in. */
static void fake_reduce(const unsigned grid[3], const unsigned block[3],
                        unsigned shared, const unsigned char *args,
                        size_t size) {
  (void)grid;
  (void)block;
  (void)shared;
  if (size < 24)
    return;
  const int *in;
  int n;
  long long *out;
  memcpy(&in, args, 8);
  memcpy(&n, args + 8, 4);
  memcpy(&out, args + 16, 8);
  long long s = 0;
  for (int i = 0; i < n; i++)
    s += in[i];
  *out = s;
}

static const struct {
  const char *name;
  fake_kernel_fn fn;
} kernels[] = {{"saxpy", fake_saxpy}, {"reduce", fake_reduce}};

/* ---- the driver API ---- */

CUresult cuInit(unsigned flags) {
  ENTER("cuInit");
  if (flags)
    return CUDA_ERROR_INVALID_VALUE;
  initialised = 1;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v) {
  ENTER("cuDriverGetVersion");
  if (!v)
    return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}

static const char *error_name(CUresult r) {
  switch (r) {
  case 0: return "CUDA_SUCCESS";
  case 1: return "CUDA_ERROR_INVALID_VALUE";
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 3: return "CUDA_ERROR_NOT_INITIALIZED";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  case 200: return "CUDA_ERROR_INVALID_IMAGE";
  case 201: return "CUDA_ERROR_INVALID_CONTEXT";
  case 218: return "CUDA_ERROR_INVALID_PTX";
  case 400: return "CUDA_ERROR_INVALID_HANDLE";
  case 500: return "CUDA_ERROR_NOT_FOUND";
  case 600: return "CUDA_ERROR_NOT_READY";
  case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
  case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
  case 999: return "CUDA_ERROR_UNKNOWN";
  default: return 0;
  }
}

static const char *error_string(CUresult r) {
  switch (r) {
  case 0: return "no error";
  case 1: return "invalid argument";
  case 2: return "out of memory";
  case 3: return "initialization error";
  case 101: return "invalid device ordinal";
  case 200: return "device kernel image is invalid";
  case 201: return "invalid device context";
  case 218: return "a PTX JIT compilation failed";
  case 400: return "invalid resource handle";
  case 500: return "named symbol not found";
  case 600: return "device not ready";
  case 700: return "an illegal memory access was encountered";
  case 701: return "too many resources requested for launch";
  case 999: return "unknown error";
  default: return 0;
  }
}

CUresult cuGetErrorName(CUresult r, const char **out) {
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  *out = error_name(r);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult r, const char **out) {
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  *out = error_string(r);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetCount(int *n) {
  ENTER("cuDeviceGetCount");
  NEED_INIT();
  if (!n)
    return CUDA_ERROR_INVALID_VALUE;
  *n = device_count();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  ENTER("cuDeviceGet");
  NEED_INIT();
  if (!d)
    return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

#define CHECK_DEVICE(d)                                                        \
  do {                                                                         \
    NEED_INIT();                                                               \
    if ((d) < 0 || (d) >= device_count())                                      \
      return CUDA_ERROR_INVALID_DEVICE;                                        \
  } while (0)

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  ENTER("cuDeviceGetName");
  CHECK_DEVICE(d);
  if (!name || len <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "Fake NVIDIA GPU %d", d);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  ENTER("cuDeviceGetAttribute");
  CHECK_DEVICE(d);
  if (!v)
    return CUDA_ERROR_INVALID_VALUE;
  int cc = env_int("FAKE_CUDA_CC", 90);
  switch (attr) {
  case 1: *v = 1024; break;            /* max threads per block */
  case 2: case 3: *v = 1024; break;    /* block dim x, y */
  case 4: *v = 64; break;              /* block dim z */
  case 5: *v = 2147483647; break;      /* grid dim x */
  case 6: case 7: *v = 65535; break;   /* grid dim y, z */
  case 8: *v = 49152; break;           /* shared memory per block */
  case 10: *v = 32; break;             /* warp size */
  case 13: *v = 1980000; break;        /* clock rate, kHz */
  case 16: *v = 132; break;            /* multiprocessors */
  case 39: *v = 2048; break;           /* max threads per multiprocessor */
  case 33: *v = d + 1; break;          /* PCI bus */
  case 34: *v = 0; break;              /* PCI device */
  case 41: *v = 1; break;              /* unified addressing */
  case 50: *v = 0; break;              /* PCI domain */
  case 75: *v = cc / 10; break;        /* compute capability major */
  case 76: *v = cc % 10; break;        /* compute capability minor */
  case 97: *v = 232448; break;         /* shared memory per block, opt-in */
  case 115: *v = !env_int("FAKE_CUDA_NO_POOLS", 0); break; /* memory pools */
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  ENTER("cuDeviceTotalMem_v2");
  CHECK_DEVICE(d);
  if (!bytes)
    return CUDA_ERROR_INVALID_VALUE;
  *bytes = (size_t)80 << 30;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(char uuid[16], CUdevice d) {
  ENTER("cuDeviceGetUuid");
  CHECK_DEVICE(d);
  if (!uuid)
    return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < 16; i++)
    uuid[i] = (char)(0x10 * d + i);
  return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) {
  ENTER("cuDeviceCanAccessPeer");
  CHECK_DEVICE(a);
  CHECK_DEVICE(b);
  if (!can)
    return CUDA_ERROR_INVALID_VALUE;
  *can = a != b;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) {
  ENTER("cuDevicePrimaryCtxRetain");
  CHECK_DEVICE(d);
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  contexts[d].device = d;
  contexts[d].retained++;
  pthread_mutex_unlock(&lock);
  *ctx = &contexts[d];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  ENTER("cuDevicePrimaryCtxRelease_v2");
  CHECK_DEVICE(d);
  pthread_mutex_lock(&lock);
  if (contexts[d].retained > 0)
    contexts[d].retained--;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(void *ctx) {
  ENTER("cuCtxSetCurrent");
  NEED_INIT();
  current = ctx;
  return CUDA_SUCCESS;
}

/* Streams run at once: nothing is ever pending. */
CUresult cuCtxSynchronize(void) {
  ENTER("cuCtxSynchronize");
  NEED_CTX();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(void **ctx) {
  ENTER("cuCtxGetCurrent");
  NEED_INIT();
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  *ctx = current;
  return CUDA_SUCCESS;
}

/* Context limits: stack (0), printf FIFO (1) and malloc heap (2) sizes.
 * A stack above 512 KiB per thread is refused, as on real GPUs. */
CUresult cuCtxSetLimit(int limit, size_t value) {
  ENTER("cuCtxSetLimit");
  NEED_CTX();
  if (limit < 0 || limit > 2 || (limit == 0 && value > 512 * 1024))
    return CUDA_ERROR_INVALID_VALUE;
  current->limits[limit] = value;
  return CUDA_SUCCESS;
}

/* Test control: a limit of device `d`'s primary context. */
size_t fake_cuda_limit(int d, int limit) {
  if (d < 0 || d >= MAX_DEVICES || limit < 0 || limit > 2)
    return 0;
  return contexts[d].limits[limit];
}

CUresult cuCtxEnablePeerAccess(void *peer, unsigned flags) {
  ENTER("cuCtxEnablePeerAccess");
  NEED_CTX();
  (void)peer;
  (void)flags;
  return CUDA_SUCCESS;
}

static CUresult alloc(void **p, size_t size) {
  if (!p || size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (posix_memalign(p, 256, size))
    return CUDA_ERROR_OUT_OF_MEMORY;
  memset(*p, 0, size);
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
  ENTER("cuMemAlloc_v2");
  NEED_CTX();
  return alloc((void **)p, size);
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  ENTER("cuMemFree_v2");
  NEED_CTX();
  free((void *)(uintptr_t)p);
  return CUDA_SUCCESS;
}

/* Stream-ordered allocation: the fake runs streams in order at once.
 * Built with -DFAKE_CUDA_NO_ASYNC_ALLOC the entry points are missing, as
 * in drivers older than CUDA 11.2. */
#ifndef FAKE_CUDA_NO_ASYNC_ALLOC
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, void *s) {
  ENTER("cuMemAllocAsync");
  NEED_STREAM(s);
  return alloc((void **)p, size);
}

CUresult cuMemFreeAsync(CUdeviceptr p, void *s) {
  ENTER("cuMemFreeAsync");
  NEED_STREAM(s);
  free((void *)(uintptr_t)p);
  return CUDA_SUCCESS;
}

/* Memory pools: a pool only records its device and release threshold
 * (fake_cuda_pool_threshold reads the last one set); allocations come from
 * malloc like every other. */
struct pool {
  int device;
  uint64_t release_threshold;
};
static uint64_t last_pool_threshold;

CUresult cuMemPoolCreate(void **pool, const int *props) {
  ENTER("cuMemPoolCreate");
  NEED_CTX();
  /* allocType 1 (pinned), handleTypes 0, location {1 (device), id}. */
  if (!pool || !props || props[0] != 1 || props[1] != 0 || props[2] != 1 || props[3] < 0 ||
      props[3] >= device_count())
    return CUDA_ERROR_INVALID_VALUE;
  struct pool *p = calloc(1, sizeof *p);
  p->device = props[3];
  *pool = p;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
  ENTER("cuMemPoolSetAttribute");
  if (!pool || !value)
    return CUDA_ERROR_INVALID_VALUE;
  if (attr == 4) {
    ((struct pool *)pool)->release_threshold = *(uint64_t *)value;
    last_pool_threshold = *(uint64_t *)value;
  }
  return CUDA_SUCCESS;
}

uint64_t fake_cuda_pool_threshold(void) { return last_pool_threshold; }

CUresult cuMemPoolTrimTo(void *pool, size_t keep) {
  ENTER("cuMemPoolTrimTo");
  (void)keep;
  return pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, void *pool, void *s) {
  ENTER("cuMemAllocFromPoolAsync");
  NEED_STREAM(s);
  if (!pool)
    return CUDA_ERROR_INVALID_VALUE;
  return alloc((void **)p, size);
}

CUresult cuMemPoolDestroy(void *pool) {
  ENTER("cuMemPoolDestroy");
  if (!pool)
    return CUDA_ERROR_INVALID_VALUE;
  free(pool);
  return CUDA_SUCCESS;
}
#endif

CUresult cuMemAllocHost_v2(void **p, size_t size) {
  ENTER("cuMemAllocHost_v2");
  NEED_CTX();
  return alloc(p, size);
}

CUresult cuMemFreeHost(void *p) {
  ENTER("cuMemFreeHost");
  NEED_CTX();
  free(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned flags) {
  ENTER("cuMemAllocManaged");
  NEED_CTX();
  if (flags != 1 && flags != 2)
    return CUDA_ERROR_INVALID_VALUE;
  return alloc((void **)p, size);
}

CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags) {
  ENTER("cuMemHostRegister_v2");
  NEED_CTX();
  (void)flags;
  return p && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemHostUnregister(void *p) {
  ENTER("cuMemHostUnregister");
  NEED_CTX();
  return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n,
                              void *s) {
  ENTER("cuMemcpyHtoDAsync_v2");
  NEED_STREAM(s);
  memcpy((void *)(uintptr_t)dst, src, n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
  ENTER("cuMemcpyDtoHAsync_v2");
  NEED_STREAM(s);
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n,
                              void *s) {
  ENTER("cuMemcpyDtoDAsync_v2");
  NEED_STREAM(s);
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src,
                           void *src_ctx, size_t n, void *s) {
  ENTER("cuMemcpyPeerAsync");
  NEED_STREAM(s);
  if (!dst_ctx || !src_ctx)
    return CUDA_ERROR_INVALID_CONTEXT;
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s) {
  ENTER("cuMemsetD8Async");
  NEED_STREAM(s);
  memset((void *)(uintptr_t)dst, v, n);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n,
                          void *s) {
  ENTER("cuMemsetD16Async");
  NEED_STREAM(s);
  if (dst % 2)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++)
    ((unsigned short *)(uintptr_t)dst)[i] = v;
  return CUDA_SUCCESS;
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, void *s) {
  ENTER("cuMemsetD32Async");
  NEED_STREAM(s);
  if (dst % 4)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++)
    ((unsigned *)(uintptr_t)dst)[i] = v;
  return CUDA_SUCCESS;
}

CUresult cuStreamCreate(void **s, unsigned flags) {
  ENTER("cuStreamCreate");
  NEED_CTX();
  (void)flags;
  if (!s)
    return CUDA_ERROR_INVALID_VALUE;
  struct stream *st = calloc(1, sizeof *st);
  if (!st)
    return CUDA_ERROR_OUT_OF_MEMORY;
  st->ctx = current;
  *s = st;
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(void *s) {
  ENTER("cuStreamDestroy_v2");
  NEED_STREAM(s);
  free(s);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(void *s) {
  ENTER("cuStreamSynchronize");
  NEED_STREAM(s);
  return CUDA_SUCCESS;
}

CUresult cuStreamQuery(void *s) {
  ENTER("cuStreamQuery");
  NEED_STREAM(s);
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags) {
  ENTER("cuStreamWaitEvent");
  NEED_STREAM(s);
  (void)flags;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuLaunchHostFunc(void *s, CUhostFn fn, void *data) {
  ENTER("cuLaunchHostFunc");
  NEED_STREAM(s);
  if (!fn)
    return CUDA_ERROR_INVALID_VALUE;
  fn(data);
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(void **e, unsigned flags) {
  ENTER("cuEventCreate");
  NEED_CTX();
  (void)flags;
  if (!e)
    return CUDA_ERROR_INVALID_VALUE;
  *e = calloc(1, sizeof(struct event));
  return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuEventRecord(void *e, void *s) {
  ENTER("cuEventRecord");
  NEED_STREAM(s);
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  ((struct event *)e)->recorded = 1;
  return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(void *e) {
  ENTER("cuEventSynchronize");
  NEED_CTX();
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventQuery(void *e) {
  ENTER("cuEventQuery");
  NEED_CTX();
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventDestroy_v2(void *e) {
  ENTER("cuEventDestroy_v2");
  NEED_CTX();
  free(e);
  return CUDA_SUCCESS;
}

/* Size of a PTX global declaration: .u32/.b32/.f32 -> 4, .b64 ... -> 8,
 * times [N] if present. */
static size_t global_size(const char *decl, const char *end) {
  size_t elem = 4;
  for (const char *p = decl; p < end; p++) {
    if (*p == '.' && (p[1] == 'u' || p[1] == 'b' || p[1] == 's' || p[1] == 'f')) {
      int bits = atoi(p + 2);
      if (bits == 8 || bits == 16 || bits == 32 || bits == 64)
        elem = (size_t)bits / 8;
    }
  }
  const char *br = memchr(decl, '[', (size_t)(end - decl));
  size_t n = br ? (size_t)atol(br + 1) : 1;
  return elem * (n ? n : 1);
}

/* A `.extern .func` the PTX does not define (other than what the driver
 * provides), as ptxas reports it when linking the module: its name in
 * `out`, or 0. */
static int unresolved_extern(const char *text, char *out, size_t size) {
  static const char *provided[] = {"vprintf", "malloc", "free", "__assertfail"};
  for (const char *p = strstr(text, ".extern .func"); p; p = strstr(p + 1, ".extern .func")) {
    const char *q = p + strlen(".extern .func");
    while (*q == ' ' || *q == '\t')
      q++;
    if (*q == '(') { /* the return value */
      while (*q && *q != ')')
        q++;
      if (*q)
        q++;
    }
    while (*q == ' ' || *q == '\t')
      q++;
    size_t n = 0;
    while ((q[n] >= 'a' && q[n] <= 'z') || (q[n] >= 'A' && q[n] <= 'Z') ||
           (q[n] >= '0' && q[n] <= '9') || q[n] == '_' || q[n] == '$')
      n++;
    if (n == 0 || n >= size)
      continue;
    memcpy(out, q, n);
    out[n] = 0;
    int skip = 0;
    for (size_t i = 0; i < sizeof provided / sizeof provided[0]; i++)
      skip |= !strcmp(out, provided[i]);
    if (skip)
      continue;
    /* Defined: a `.func` line naming it that is not an `.extern`. */
    int defined = 0;
    for (const char *d = strstr(text, out); d && !defined; d = strstr(d + 1, out)) {
      const char *ls = d, *le = strchr(d, '\n');
      while (ls > text && ls[-1] != '\n')
        ls--;
      if (!le)
        le = d + strlen(d);
      const char *f = strstr(ls, ".func");
      const char *x = strstr(ls, ".extern");
      defined = f && f < le && !(x && x < le);
    }
    if (!defined)
      return 1;
  }
  return 0;
}

/* --- cubins (ELF64): enough of the format to find symbols ------------- */

typedef struct {
  unsigned char ident[16];
  uint16_t type, machine;
  uint32_t version;
  uint64_t entry, phoff, shoff;
  uint32_t flags;
  uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
} Elf64Header;

typedef struct {
  uint32_t name, type;
  uint64_t flags, addr, offset, size;
  uint32_t link, info;
  uint64_t addralign, entsize;
} Elf64Section;

typedef struct {
  uint32_t name;
  unsigned char info, other;
  uint16_t shndx;
  uint64_t value, size;
} Elf64Symbol;

enum { ELF_SHT_SYMTAB = 2, ELF_SHT_NOBITS = 8, ELF_STT_FUNC = 2 };

/* The bytes a cubin spans (the driver API passes no size): its section
 * headers and every section's contents. */
static size_t elf_image_size(const unsigned char *b) {
  const Elf64Header *h = (const Elf64Header *)b;
  if (b[4] != 2 || h->shentsize != sizeof(Elf64Section))
    return 0;
  size_t end = h->shoff + (size_t)h->shnum * sizeof(Elf64Section);
  const Elf64Section *sh = (const Elf64Section *)(b + h->shoff);
  for (unsigned i = 0; i < h->shnum; i++)
    if (sh[i].type != ELF_SHT_NOBITS && sh[i].offset + sh[i].size > end)
      end = sh[i].offset + sh[i].size;
  return end;
}

/* The symbol `name` of a cubin whose type is a function (`func` 1) or not
 * (0); NULL when it has none. */
static const Elf64Symbol *elf_symbol(const struct module *m, const char *name, int func) {
  const unsigned char *b = (const unsigned char *)m->image;
  const Elf64Header *h = (const Elf64Header *)b;
  const Elf64Section *sh = (const Elf64Section *)(b + h->shoff);
  for (unsigned i = 0; i < h->shnum; i++) {
    if (sh[i].type != ELF_SHT_SYMTAB || sh[i].link >= h->shnum)
      continue;
    const Elf64Symbol *sym = (const Elf64Symbol *)(b + sh[i].offset);
    const char *names = (const char *)b + sh[sh[i].link].offset;
    size_t count = sh[i].size / sizeof(Elf64Symbol);
    for (size_t j = 0; j < count; j++) {
      if (sym[j].shndx == 0 || sym[j].name >= sh[sh[i].link].size)
        continue;
      if (((sym[j].info & 0xf) == ELF_STT_FUNC) != func)
        continue;
      if (!strcmp(names + sym[j].name, name))
        return &sym[j];
    }
  }
  return 0;
}

/* A cubin global's size and initial bytes (zero in a NOBITS section). */
static void *elf_global(const struct module *m, const Elf64Symbol *sym) {
  const unsigned char *b = (const unsigned char *)m->image;
  const Elf64Header *h = (const Elf64Header *)b;
  const Elf64Section *sh = (const Elf64Section *)(b + h->shoff);
  void *mem = calloc(1, sym->size ? sym->size : 1);
  if (mem && sym->shndx < h->shnum && sh[sym->shndx].type != ELF_SHT_NOBITS &&
      sym->value + sym->size <= sh[sym->shndx].size)
    memcpy(mem, b + sh[sym->shndx].offset + sym->value, sym->size);
  return mem;
}

CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned n,
                            int *options, void **values) {
  ENTER("cuModuleLoadDataEx");
  NEED_CTX();
  if (!mod || !image)
    return CUDA_ERROR_INVALID_VALUE;
  const unsigned char *b = image;
  int is_elf = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  int is_fatbin = b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba;
  char *error_log = 0;
  size_t error_size = 0;
  pthread_mutex_lock(&lock);
  jit_count = 0;
  for (unsigned i = 0; i < n && i < 32; i++) {
    jit_keys[jit_count] = options[i];
    jit_values[jit_count] = (long)(intptr_t)values[i];
    jit_count++;
    if (options[i] == 5)
      error_log = values[i];
    if (options[i] == 6)
      error_size = (size_t)(uintptr_t)values[i];
  }
  pthread_mutex_unlock(&lock);
  size_t size;
  if (is_elf && (size = elf_image_size(b)) > 0) {
    /* a cubin: read (symbols) */
  } else if (is_elf || is_fatbin) {
    size = 64; /* the fake does not read other binary images */
    is_elf = 0;
  } else {
    size = strlen(image);
    if (!strstr(image, ".version"))
      return CUDA_ERROR_INVALID_IMAGE;
    if (strstr(image, "FAKE_INVALID_PTX")) {
      if (error_log && error_size)
        snprintf(error_log, error_size,
                 "ptxas fatal   : fake syntax error near FAKE_INVALID_PTX");
      return CUDA_ERROR_INVALID_PTX;
    }
    char missing[128];
    if (unresolved_extern(image, missing, sizeof missing)) {
      if (error_log && error_size)
        snprintf(error_log, error_size,
                 "ptxas fatal   : Unresolved extern function '%s'", missing);
      return CUDA_ERROR_INVALID_PTX;
    }
  }
  struct module *m = calloc(1, sizeof *m);
  if (!m)
    return CUDA_ERROR_OUT_OF_MEMORY;
  m->ctx = current;
  m->image = malloc(size + 1);
  memcpy(m->image, image, size);
  m->image[size] = 0;
  m->size = size;
  m->is_text = !(is_elf || is_fatbin);
  m->is_elf = is_elf;
  *mod = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(void *mod) {
  ENTER("cuModuleUnload");
  NEED_CTX();
  struct module *m = mod;
  if (!m)
    return CUDA_ERROR_INVALID_HANDLE;
  for (int i = 0; i < m->nglobals; i++)
    free(m->globals[i].mem);
  free(m->image);
  free(m);
  return CUDA_SUCCESS;
}

/* Whether `word` appears in `text` as a whole identifier after `directive`
 * on the same line; returns the line start or NULL. */
static const char *find_decl(const char *text, const char *directive,
                             const char *word, const char **line_end) {
  size_t wl = strlen(word);
  for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
    char after = p[wl];
    char before = p > text ? p[-1] : ' ';
    if ((after >= 'a' && after <= 'z') || (after >= 'A' && after <= 'Z') ||
        (after >= '0' && after <= '9') || after == '_')
      continue;
    if (!(before == ' ' || before == '\t'))
      continue;
    const char *ls = p;
    while (ls > text && ls[-1] != '\n')
      ls--;
    const char *le = strchr(p, '\n');
    if (!le)
      le = p + wl;
    const char *d = strstr(ls, directive);
    if (d && d < p) {
      if (line_end)
        *line_end = le;
      return ls;
    }
  }
  return 0;
}

CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
  ENTER("cuModuleGetFunction");
  NEED_CTX();
  struct module *m = mod;
  if (!fn || !m || !name)
    return CUDA_ERROR_INVALID_VALUE;
  if (m->is_text && !find_decl(m->image, ".entry", name, 0))
    return CUDA_ERROR_NOT_FOUND;
  if (m->is_elf && !elf_symbol(m, name, 1))
    return CUDA_ERROR_NOT_FOUND;
  fake_kernel_fn k = 0;
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
    if (!strcmp(kernels[i].name, name))
      k = kernels[i].fn;
  if (!k && !m->is_text && !m->is_elf)
    return CUDA_ERROR_NOT_FOUND;
  struct function *f = calloc(1, sizeof *f);
  if (!f)
    return CUDA_ERROR_OUT_OF_MEMORY;
  f->module = m;
  snprintf(f->name, sizeof f->name, "%s", name);
  f->fn = k; /* NULL: a kernel the fake cannot run (launches do nothing) */
  *fn = f;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *size, void *mod,
                              const char *name) {
  ENTER("cuModuleGetGlobal_v2");
  NEED_CTX();
  struct module *m = mod;
  if (!m || !name)
    return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < m->nglobals; i++) {
    if (!strcmp(m->globals[i].name, name)) {
      if (p)
        *p = (CUdeviceptr)(uintptr_t)m->globals[i].mem;
      if (size)
        *size = m->globals[i].size;
      return CUDA_SUCCESS;
    }
  }
  if (m->nglobals == MAX_GLOBALS)
    return CUDA_ERROR_NOT_FOUND;
  const char *le = 0;
  const char *decl = m->is_text ? find_decl(m->image, ".global", name, &le) : 0;
  const Elf64Symbol *sym = m->is_elf ? elf_symbol(m, name, 0) : 0;
  if (!decl && !sym)
    return CUDA_ERROR_NOT_FOUND;
  struct global *g = &m->globals[m->nglobals++];
  snprintf(g->name, sizeof g->name, "%s", name);
  g->size = sym ? sym->size : global_size(decl, le);
  g->mem = sym ? elf_global(m, sym) : calloc(1, g->size);
  if (p)
    *p = (CUdeviceptr)(uintptr_t)g->mem;
  if (size)
    *size = g->size;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *v, int attr, void *fn) {
  ENTER("cuFuncGetAttribute");
  NEED_CTX();
  if (!v || !fn)
    return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
  case 0: *v = 1024; break; /* max threads per block */
  case 1: *v = 0; break;    /* static shared memory */
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
  ENTER("cuFuncSetAttribute");
  NEED_CTX();
  if (!fn || attr != 8 || value < 0 || value > 232448)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, void *fn,
                                          void *b2d, size_t dyn, int limit) {
  ENTER("cuOccupancyMaxPotentialBlockSize");
  NEED_CTX();
  (void)b2d;
  (void)limit;
  if (!min_grid || !block || !fn)
    return CUDA_ERROR_INVALID_VALUE;
  *min_grid = 264;
  *block = dyn > 65536 ? 256 : 512;
  return CUDA_SUCCESS;
}

/* Blocks per SM: as if 32 registers per thread of a 64 Ki-register SM
 * held them, at most 32 blocks and 2048 threads (an H100-like SM). */
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *fn, int block, size_t dyn) {
  ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  NEED_CTX();
  (void)dyn;
  if (!blocks || !fn || block <= 0 || block > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  int n = 2048 / block;
  *blocks = n > 32 ? 32 : n;
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shared,
                        void *s, void **params, void **extra) {
  ENTER("cuLaunchKernel");
  NEED_STREAM(s);
  struct function *f = fn;
  if (!f)
    return CUDA_ERROR_INVALID_HANDLE;
  if (f->module->ctx != current)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (!gx || !gy || !gz || !bx || !by || !bz)
    return CUDA_ERROR_INVALID_VALUE;
  if ((unsigned long)bx * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (shared > 232448)
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  if (params)
    return CUDA_ERROR_INVALID_VALUE; /* the plugin always uses `extra` */
  const unsigned char *args = 0;
  size_t size = 0;
  if (extra) {
    for (int i = 0; extra[i]; i += 2) {
      if (extra[i] == (void *)1)
        args = extra[i + 1];
      else if (extra[i] == (void *)2)
        size = *(size_t *)extra[i + 1];
      else
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  pthread_mutex_lock(&lock);
  last_launch.grid[0] = gx;
  last_launch.grid[1] = gy;
  last_launch.grid[2] = gz;
  last_launch.block[0] = bx;
  last_launch.block[1] = by;
  last_launch.block[2] = bz;
  last_launch.shared = shared;
  last_launch.arg_size = size;
  last_launch.used_extra = extra != 0;
  last_launch.count++;
  memset(last_launch.args, 0, sizeof last_launch.args);
  if (args)
    memcpy(last_launch.args, args,
           size < sizeof last_launch.args ? size : sizeof last_launch.args);
  last_launch.dyn_ptr = 0;
  memset(last_launch.launch_env, 0, sizeof last_launch.launch_env);
  last_launch.buffer_nonzero = 0;
  if (args && size >= 8) {
    memcpy(&last_launch.dyn_ptr, args, 8);
    uint64_t env = last_launch.dyn_ptr;
    /* Only while a test asks, and only for kernels the fake cannot run
     * (no host function): then the word is a launch environment. */
    if (inspect_reduction && env && env != ~(uint64_t)0 && !f->fn) {
      unsigned char *e = (unsigned char *)(uintptr_t)env;
      memcpy(last_launch.launch_env, e, 16);
      uint64_t buffer;
      memcpy(&buffer, e + 8, 8);
      unsigned char *b = (unsigned char *)(uintptr_t)buffer;
      for (size_t i = 0; b && i < inspect_reduction; i++)
        last_launch.buffer_nonzero += b[i] != 0;
      if (scribble_reduction) {
        if (b)
          memset(b, 0xab, inspect_reduction);
        memset(e, 0x07, 8); /* ReductionCnt, ReductionIterCnt */
      }
    }
  }
  pthread_mutex_unlock(&lock);
  if (f->fn) {
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    f->fn(grid, block, shared, args, size);
  }
  return CUDA_SUCCESS;
}
