/* A fake HSA runtime (libhsa-runtime64.so.1) for CI machines without an AMD
 * GPU.
 *
 * It implements the subset of HSA 1.1 and AMD's extensions that the AMDGPU
 * plugin calls (plugins/amdgpu/src/sys.rs: the same names, signatures,
 * constants and layouts), over host memory:
 *
 *  - hsa_init / hsa_shut_down count references; every other call fails with
 *    HSA_STATUS_ERROR_NOT_INITIALIZED unless the count is positive
 *    (hsa_status_string excepted, so that an hsa_init failure can be named);
 *  - agents: one CPU agent ("fake-cpu") then HSA_FAKE_GPUS (default 2, at
 *    most 15) GPU agents of target ID HSA_FAKE_ARCH (default gfx90a; e.g.
 *    gfx90a:sramecc+:xnack-), MI210-like: the agent's name is the processor,
 *    its first ISA is named amdgcn-amd-amdhsa--HSA_FAKE_ARCH (NUL counted),
 *    and, as ROCr does, a processor of an LLVM generic family (gfx1100:
 *    gfx11-generic) has a second ISA, the generic one with the same
 *    features (fake_hsa_set_arch(target_id, with_generic_isa) changes the
 *    target ID, and without the generic ISA the fake, as runtimes older
 *    than generic code objects, neither lists nor loads generic code);
 *    HSA_XNACK=1 (or 0; other values are ignored) turns xnack on (off) as
 *    ROCr does, where the target ID has the feature;
 *  - memory pools: the CPU agent has a fine-grained kernarg pool and a
 *    fine-grained pool; each GPU a coarse-grained 64 GiB pool and a group
 *    segment pool that does not allow allocation. Allocations are zeroed,
 *    page-aligned anonymous mappings, at most HSA_FAKE_MAX_ALLOC bytes
 *    (default 1 TiB) live at once; hsa_amd_agents_allow_access is recorded;
 *  - hsa_amd_memory_lock returns the host pointer itself, and is counted;
 *  - hsa_amd_memory_async_copy copies with memmove, but only between ranges
 *    that lie in one pool allocation, executable variable or locked host
 *    range each (pageable memory is refused: INVALID_ARGUMENT), then
 *    decrements the completion signal. A copy whose dependency signals are
 *    not all 0 waits in a list, and runs when a signal change satisfies
 *    them (in that hsa_signal_store_screlease or kernel completion);
 *  - signals are heap objects; waits sleep on a condition variable (never
 *    holding the state lock), the timeout hint taken as nanoseconds;
 *  - queues: storing to a queue's doorbell processes its packets at once in
 *    that call, from the read index up to the write index, stopping at a
 *    packet still INVALID (published later by another thread; an error when
 *    it is the very packet the doorbell names). Only kernel dispatches are
 *    supported. Each consumed slot's type goes back to INVALID, the read
 *    index advances and the completion signal is decremented. Any error is
 *    reported through the queue's callback (called on the ringing thread,
 *    with no lock held) and the queue then stops processing, as ROCr's does;
 *  - a dispatch is checked: its kernel object must name a kernel of a frozen
 *    executable loaded for the queue's agent (else HSA_STATUS_ERROR), its
 *    setup, work-group sizes (>= 1, product <= 1024), grid sizes (>= 1) and
 *    segment sizes (at least the descriptor's) must be sane (else
 *    INVALID_PACKET_FORMAT), and its kernarg_address must point at the
 *    descriptor's kernarg_size bytes of runtime memory (else
 *    MEMORY_APERTURE_VIOLATION);
 *  - code objects: ELF64 little-endian, EM_AMDGPU, every offset checked; a
 *    code object loads only for an agent whose processor is its
 *    EF_AMDGPU_MACH, or whose family's generic processor it is with a
 *    generic version (e_flags bits 24-31, code object version 6) of at
 *    least 1, and whose xnack/sramecc settings suit the code object's
 *    (e_flags of code object version 4 and later, as ROCr's loader); its ".kd" symbols are kernels (their descriptors give
 *    the segment sizes), its global or weak data objects are variables with
 *    host memory of their initial bytes, per executable and agent;
 *  - kernels run as the host functions below of the same name, over
 *    grid_size_x work-items, with the kernarg bytes: fake_saxpy, fake_fill,
 *    fake_fault (reports MEMORY_APERTURE_VIOLATION, does not complete), and
 *    fake_page_fault (a page fault at the address of its first argument:
 *    the handler registered last with hsa_amd_register_system_event_handler
 *    is told, with the queue's agent (ROCr tells every handler; the tests'
 *    runtimes share the fake, and only the newest is to hear of it); the queue stops, and neither its callback
 *    is called nor the completion signal decremented);
 *    the fake kernels' pointers must lie in runtime memory (else a fault
 *    too). Other kernels (e.g. OpenMP ones) are recorded, then do nothing;
 *  - every call is counted (fake_hsa_calls); fake_hsa_fail(name, status,
 *    count) makes the next `count` calls of `name` that return a status
 *    return `status` (error injection); the last dispatch (packet, kernel
 *    name, kernarg bytes) and the live objects can be read back by tests;
 *    uses of unknown signals or queues by calls that cannot fail are
 *    counted as "invalid_handle" and reported on stderr.
 *
 * Built by the tests with clang-22 into a temporary directory and loaded by
 * the plugin through OFFLOAD_HSA_RUNTIME. Plain C: nothing here unwinds, and
 * nothing may crash on a bad handle or a hostile code object. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef uint32_t hsa_status_t;
typedef int64_t hsa_signal_value_t;
typedef struct { uint64_t handle; } hsa_agent_t;
typedef struct { uint64_t handle; } hsa_signal_t;
typedef struct { uint64_t handle; } hsa_amd_memory_pool_t;
typedef struct { uint64_t handle; } hsa_executable_t;
typedef struct { uint64_t handle; } hsa_executable_symbol_t;
typedef struct { uint64_t handle; } hsa_code_object_reader_t;
typedef struct { uint64_t handle; } hsa_isa_t;
typedef struct { uint64_t handle; } hsa_loaded_code_object_t;

typedef struct {
  uint32_t type, features;
  void *base_address;
  hsa_signal_t doorbell_signal;
  uint32_t size, reserved1;
  uint64_t id;
} hsa_queue_t;

typedef struct {
  uint16_t header, setup, workgroup_size_x, workgroup_size_y, workgroup_size_z,
      reserved0;
  uint32_t grid_size_x, grid_size_y, grid_size_z, private_segment_size,
      group_segment_size;
  uint64_t kernel_object, kernarg_address, reserved2;
  hsa_signal_t completion_signal;
} packet_t;

_Static_assert(sizeof(packet_t) == 64, "an AQL packet is 64 bytes");
_Static_assert(sizeof(hsa_queue_t) == 40, "hsa_queue_t is 40 bytes");

typedef hsa_status_t (*agent_cb)(hsa_agent_t, void *);
typedef hsa_status_t (*pool_cb)(hsa_amd_memory_pool_t, void *);
typedef void (*queue_cb)(hsa_status_t, hsa_queue_t *, void *);

enum { /* hsa_status_t, less the HSA_STATUS_ERROR_ prefix */
  SUCCESS = 0x0, ERROR = 0x1000, INVALID_ARGUMENT = 0x1001,
  INVALID_QUEUE_CREATION = 0x1002, INVALID_ALLOCATION = 0x1003,
  INVALID_AGENT = 0x1004, INVALID_SIGNAL = 0x1006, INVALID_QUEUE = 0x1007,
  OUT_OF_RESOURCES = 0x1008, INVALID_PACKET_FORMAT = 0x1009,
  NOT_INITIALIZED = 0x100B, INVALID_ISA = 0x100F, INVALID_CODE_OBJECT = 0x1010,
  INVALID_EXECUTABLE = 0x1011, FROZEN_EXECUTABLE = 0x1012,
  INVALID_SYMBOL_NAME = 0x1013, INVALID_EXECUTABLE_SYMBOL = 0x1019,
  INVALID_CODE_OBJECT_READER = 0x1021, INVALID_MEMORY_POOL = 0x28,
  MEMORY_APERTURE_VIOLATION = 0x29,
};

enum { PACKET_INVALID = 1, PACKET_KERNEL_DISPATCH = 2 };
enum { KIND_VARIABLE = 0, KIND_KERNEL = 1 };

#define MAX_GPUS 15
#define AGENT_BASE 0xa9e0000ULL /* agent i (0: the CPU) is AGENT_BASE + i */
#define POOL_BASE 0x9001000ULL  /* pool j of agent i is POOL_BASE + 16i + j */
#define KERNEL_OBJECT_BASE 0x7f0c0de00000ULL /* + 64 * symbol id */
#define MAX_QUEUE_SIZE 131072u
#define MAX_VARIABLE (256u << 20)
#define KERNARG_RECORD 4096
#define MAX_COUNTERS 128
#define MAX_FAILS 16

/* ---- state ---- */

struct alloc { /* a pool allocation */
  struct alloc *next;
  char *base;
  size_t size;
  uint64_t pool;
  uint32_t allowed; /* bit i: allow_access named agent i */
};

struct hostlock { /* a hsa_amd_memory_lock */
  struct hostlock *next;
  char *host;
  size_t size;
};

struct queue;

struct sig {
  struct sig *next;
  _Atomic int64_t value;
  struct queue *queue; /* a doorbell: the queue it rings */
};

struct copy { /* an async copy waiting for its dependencies */
  struct copy *next;
  void *dst;
  const void *src;
  size_t size;
  uint32_t ndeps;
  uint64_t *deps;
  uint64_t done;
};

struct queue {
  hsa_queue_t q; /* first: the plugin's hsa_queue_t * points here */
  struct queue *next;
  _Atomic uint64_t write_index, read_index;
  queue_cb callback;
  void *data;
  int agent;
  int dead; /* an error was reported: packets are no longer processed */
  struct sig *doorbell;
  pthread_mutex_t proc; /* one doorbell processed at a time */
};

struct reader { struct reader *next; uint64_t id; unsigned char *bytes; size_t size; };
struct exec { struct exec *next; uint64_t id; int frozen; };

struct symbol {
  struct symbol *next;
  uint64_t id;
  struct exec *exec;
  int agent, kind;
  char *name; /* as in the ELF: kernels end in ".kd" */
  uint32_t kernarg, group, priv; /* kernels: from the descriptor */
  char *addr;                    /* variables: their host memory */
  uint64_t size;
};

struct counter { char name[64]; long calls; };
struct fail { char name[64]; hsa_status_t status; int count; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wait_cond = PTHREAD_COND_INITIALIZER;
static _Atomic int refcount;
static int ngpus = -1; /* read from the environment at the first hsa_init */
static char arch[64];
/* Whether agents list their family's generic ISA after their own. */
static int list_generic = 1;
/* Guards arch and list_generic, which tests change while runtime threads
 * may read them (taken after `lock`, never before it). */
static pthread_mutex_t arch_lock = PTHREAD_MUTEX_INITIALIZER;

/* A copy of the agents' target ID into `out`; returns list_generic. */
static int arch_now(char out[64]) {
  pthread_mutex_lock(&arch_lock);
  memcpy(out, arch, sizeof arch);
  int generic = list_generic;
  pthread_mutex_unlock(&arch_lock);
  return generic;
}
static uint64_t max_alloc, live_bytes;
static struct alloc *allocs;
static struct hostlock *locks;
static struct sig *signals;
static struct copy *pending;
static struct queue *queues;
static struct reader *readers;
static struct exec *execs;
static struct symbol *symbols;
static uint64_t next_id = 1;
static struct counter counters[MAX_COUNTERS];
static struct fail fails[MAX_FAILS];

static struct {
  int count;
  packet_t packet;
  char name[128];
  unsigned char kernarg[KERNARG_RECORD];
  size_t kernarg_size;
} last;

/* Count the call; return an injected failure if one is pending and the
 * function can return one. */
static hsa_status_t enter(const char *name, int can_fail) {
  hsa_status_t r = SUCCESS;
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
  for (int f = 0; can_fail && f < MAX_FAILS; f++) {
    if (fails[f].count > 0 && !strcmp(fails[f].name, name)) {
      fails[f].count--;
      r = fails[f].status;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

#define ENTER()                                                                \
  do {                                                                         \
    hsa_status_t injected_ = enter(__func__, 1);                               \
    if (injected_ != SUCCESS)                                                  \
      return injected_;                                                        \
    if (atomic_load(&refcount) <= 0)                                           \
      return NOT_INITIALIZED;                                                  \
  } while (0)

/* For the calls that return no status: count, and whether initialised. */
#define ENTER_VALUE() ((void)enter(__func__, 0), atomic_load(&refcount) > 0)

static void invalid_handle(const char *what, uint64_t handle) {
  enter("invalid_handle", 0);
  fprintf(stderr, "fake_hsa: %s: unknown handle 0x%llx\n", what,
          (unsigned long long)handle);
}

static int agent_index(hsa_agent_t a) {
  if (ngpus < 0 || a.handle < AGENT_BASE || a.handle - AGENT_BASE > (uint64_t)ngpus)
    return -1;
  return (int)(a.handle - AGENT_BASE);
}

/* Whether [p, p + n) lies in one pool allocation, executable variable or
 * (with `host`) locked host range. Call with `lock` held. */
static int tracked(const void *ptr, size_t n, int host) {
  const char *p = ptr;
  for (struct alloc *a = allocs; a; a = a->next)
    if (p >= a->base && n <= a->size && (size_t)(p - a->base) <= a->size - n)
      return 1;
  for (struct symbol *s = symbols; s; s = s->next)
    if (s->kind == KIND_VARIABLE && p >= s->addr && n <= s->size &&
        (size_t)(p - s->addr) <= s->size - n)
      return 1;
  for (struct hostlock *l = host ? locks : 0; l; l = l->next)
    if (p >= l->host && n <= l->size && (size_t)(p - l->host) <= l->size - n)
      return 1;
  return 0;
}

static void *map_zero(size_t size) {
  if (size > SIZE_MAX - 4095)
    return 0;
  void *p = mmap(0, (size + 4095) & ~(size_t)4095, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? 0 : p;
}

static void unmap(void *p, size_t size) {
  if (p)
    munmap(p, (size + 4095) & ~(size_t)4095);
}

/* ---- test controls (not part of the runtime API) ---- */

long fake_hsa_calls(const char *name) {
  long n = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_COUNTERS && counters[i].name[0]; i++)
    if (!strcmp(counters[i].name, name))
      n = counters[i].calls;
  pthread_mutex_unlock(&lock);
  return n;
}

void fake_hsa_fail(const char *name, uint32_t status, int count) {
  pthread_mutex_lock(&lock);
  int f = 0, free_slot = -1;
  for (; f < MAX_FAILS && strcmp(fails[f].name, name); f++)
    if (free_slot < 0 && fails[f].count <= 0)
      free_slot = f;
  if (f == MAX_FAILS)
    f = free_slot;
  if (f >= 0) {
    snprintf(fails[f].name, sizeof fails[f].name, "%s", name);
    fails[f].status = status;
    fails[f].count = count;
  }
  pthread_mutex_unlock(&lock);
}

int fake_hsa_last_dispatch(void *packet64, char *name, size_t name_cap,
                           void *kernarg, size_t kernarg_cap,
                           size_t *kernarg_size) {
  pthread_mutex_lock(&lock);
  int n = last.count;
  if (packet64)
    memcpy(packet64, &last.packet, sizeof last.packet);
  if (name && name_cap)
    snprintf(name, name_cap, "%s", last.name);
  if (kernarg)
    memcpy(kernarg, last.kernarg,
           kernarg_cap < last.kernarg_size ? kernarg_cap : last.kernarg_size);
  if (kernarg_size)
    *kernarg_size = last.kernarg_size;
  pthread_mutex_unlock(&lock);
  return n;
}

#define LIVE(fn, type, list, cond)                                             \
  long fn(void) {                                                              \
    long n = 0;                                                                \
    pthread_mutex_lock(&lock);                                                 \
    for (type *x = list; x; x = x->next)                                       \
      n += (cond);                                                             \
    pthread_mutex_unlock(&lock);                                               \
    return n;                                                                  \
  }
LIVE(fake_hsa_live_allocations, struct alloc, allocs, 1)
LIVE(fake_hsa_live_locks, struct hostlock, locks, 1)
LIVE(fake_hsa_live_signals, struct sig, signals, !x->queue)
LIVE(fake_hsa_live_queues, struct queue, queues, 1)
LIVE(fake_hsa_live_executables, struct exec, execs, 1)

int fake_hsa_allowed(const void *ptr, uint64_t agent_handle) {
  int r = 0;
  hsa_agent_t agent = {agent_handle};
  pthread_mutex_lock(&lock);
  int i = agent_index(agent);
  for (struct alloc *a = allocs; a && i >= 0; a = a->next)
    if ((const char *)ptr >= a->base && (const char *)ptr < a->base + a->size)
      r = (a->allowed >> i) & 1;
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- the "kernels": return 0, or the fault status ---- */

/* hsa_amd_register_system_event_handler's callback, and the address of the
 * page fault a kernel raised (read by `process`). */
typedef hsa_status_t (*event_cb)(const void *event, void *data);
static event_cb system_handler;
static void *system_handler_data;
static uint64_t page_fault_address;

typedef hsa_status_t (*fake_kernel_fn)(const packet_t *, const unsigned char *,
                                       size_t);

/* saxpy(int n @0, float a @4, float *x @8, float *y @16): y = a * x + y. */
static hsa_status_t fake_saxpy(const packet_t *p, const unsigned char *args,
                               size_t size) {
  if (size < 24)
    return MEMORY_APERTURE_VIOLATION;
  int n;
  float a, *x, *y;
  memcpy(&n, args, 4);
  memcpy(&a, args + 4, 4);
  memcpy(&x, args + 8, 8);
  memcpy(&y, args + 16, 8);
  size_t count = n <= 0 ? 0 : p->grid_size_x < (unsigned)n ? p->grid_size_x : n;
  if (count && (!tracked(x, count * 4, 1) || !tracked(y, count * 4, 1)))
    return MEMORY_APERTURE_VIOLATION;
  for (size_t i = 0; i < count; i++)
    y[i] = a * x[i] + y[i];
  return SUCCESS;
}

/* fill(int *p @0, int v @8, int n @12): p[i] = v. */
static hsa_status_t fake_fill(const packet_t *p, const unsigned char *args,
                              size_t size) {
  if (size < 16)
    return MEMORY_APERTURE_VIOLATION;
  int *dst, v, n;
  memcpy(&dst, args, 8);
  memcpy(&v, args + 8, 4);
  memcpy(&n, args + 12, 4);
  size_t count = n <= 0 ? 0 : p->grid_size_x < (unsigned)n ? p->grid_size_x : n;
  if (count && !tracked(dst, count * 4, 1))
    return MEMORY_APERTURE_VIOLATION;
  for (size_t i = 0; i < count; i++)
    dst[i] = v;
  return SUCCESS;
}

/* A memory fault: the completion signal is never decremented. */
static hsa_status_t fake_fault(const packet_t *p, const unsigned char *args,
                               size_t size) {
  (void)p, (void)args, (void)size;
  return MEMORY_APERTURE_VIOLATION;
}

/* Not an HSA status: the dispatch raised a page fault (a system event). */
#define PAGE_FAULT 0xfa017u

/* A page fault at the address in the first argument. */
static hsa_status_t fake_page_fault(const packet_t *p, const unsigned char *args,
                                    size_t size) {
  (void)p;
  page_fault_address = 0;
  if (size >= 8)
    memcpy(&page_fault_address, args, 8);
  return PAGE_FAULT;
}

static const struct {
  const char *name;
  fake_kernel_fn fn;
} kernels[] = {{"fake_saxpy", fake_saxpy},
               {"fake_fill", fake_fill},
               {"fake_fault", fake_fault},
               {"fake_page_fault", fake_page_fault}};

/* ---- init, status strings, agents ---- */

hsa_status_t hsa_init(void) {
  hsa_status_t injected = enter(__func__, 1);
  if (injected)
    return injected;
  pthread_mutex_lock(&lock);
  if (ngpus < 0) {
    const char *g = getenv("HSA_FAKE_GPUS"), *a = getenv("HSA_FAKE_ARCH");
    const char *m = getenv("HSA_FAKE_MAX_ALLOC");
    ngpus = g && *g ? atoi(g) : 2;
    ngpus = ngpus < 0 ? 0 : ngpus > MAX_GPUS ? MAX_GPUS : ngpus;
    pthread_mutex_lock(&arch_lock);
    snprintf(arch, sizeof arch, "%s", a && *a ? a : "gfx90a");
    const char *x = getenv("HSA_XNACK");
    char *xnack = strstr(arch, ":xnack");
    int on = x && !strcmp(x, "1"), off = x && !strcmp(x, "0");
    if ((on || off) && xnack && (xnack[6] == '+' || xnack[6] == '-'))
      xnack[6] = on ? '+' : '-';
    pthread_mutex_unlock(&arch_lock);
    max_alloc = m && *m ? strtoull(m, 0, 0) : 1ULL << 40;
  }
  atomic_fetch_add(&refcount, 1);
  pthread_mutex_unlock(&lock);
  return SUCCESS;
}

hsa_status_t hsa_shut_down(void) {
  ENTER();
  int n = atomic_load(&refcount);
  while (n > 0 && !atomic_compare_exchange_weak(&refcount, &n, n - 1))
    ;
  return n > 0 ? SUCCESS : NOT_INITIALIZED;
}

static const struct {
  hsa_status_t status;
  const char *text;
} strings[] = {
    {0x0, "HSA_STATUS_SUCCESS: The function has been executed successfully."},
    {0x1, "HSA_STATUS_INFO_BREAK: A traversal over a list of elements has been interrupted by the application before completing."},
    {0x1000, "HSA_STATUS_ERROR: A generic error has occurred."},
    {0x1001, "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a precondition stated in the documentation of the corresponding formal argument."},
    {0x1002, "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION: The requested queue creation is not valid."},
    {0x1003, "HSA_STATUS_ERROR_INVALID_ALLOCATION: The requested allocation is not valid."},
    {0x1004, "HSA_STATUS_ERROR_INVALID_AGENT: The agent is invalid."},
    {0x1005, "HSA_STATUS_ERROR_INVALID_REGION: The memory region is invalid."},
    {0x1006, "HSA_STATUS_ERROR_INVALID_SIGNAL: The signal is invalid."},
    {0x1007, "HSA_STATUS_ERROR_INVALID_QUEUE: The queue is invalid."},
    {0x1008, "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources."},
    {0x1009, "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: The AQL packet is malformed."},
    {0x100A, "HSA_STATUS_ERROR_RESOURCE_FREE: An error has been detected while releasing a resource."},
    {0x100B, "HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while the reference count of the HSA runtime is zero."},
    {0x100C, "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW: The maximum reference count for the object has been reached."},
    {0x100D, "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: The arguments passed to a function are not compatible."},
    {0x100E, "HSA_STATUS_ERROR_INVALID_INDEX: The index is invalid."},
    {0x100F, "HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid."},
    {0x1010, "HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid."},
    {0x1011, "HSA_STATUS_ERROR_INVALID_EXECUTABLE: The executable is invalid."},
    {0x1012, "HSA_STATUS_ERROR_FROZEN_EXECUTABLE: The executable is frozen."},
    {0x1013, "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: There is no symbol with the given name."},
    {0x1014, "HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED: The variable is already defined."},
    {0x1015, "HSA_STATUS_ERROR_VARIABLE_UNDEFINED: The variable is undefined."},
    {0x1016, "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception."},
    {0x1017, "HSA_STATUS_ERROR_INVALID_ISA_NAME: The ISA name is invalid."},
    {0x1018, "HSA_STATUS_ERROR_INVALID_CODE_SYMBOL: The code object symbol is invalid."},
    {0x1019, "HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL: The executable symbol is invalid."},
    {0x1020, "HSA_STATUS_ERROR_INVALID_FILE: The file descriptor is invalid."},
    {0x1021, "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER: The code object reader is invalid."},
    {0x1022, "HSA_STATUS_ERROR_INVALID_CACHE: The cache is invalid."},
    {0x1023, "HSA_STATUS_ERROR_INVALID_WAVEFRONT: The wavefront is invalid."},
    {0x1024, "HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP: The signal group is invalid."},
    {0x1025, "HSA_STATUS_ERROR_INVALID_RUNTIME_STATE: The HSA runtime is not in the configuration state."},
    {0x1026, "HSA_STATUS_ERROR_FATAL: The queue received an error that may require process termination."},
    {0x28, "HSA_STATUS_ERROR_INVALID_MEMORY_POOL: The memory pool is invalid."},
    {0x29, "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address."},
    {0x2A, "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: The agent executed an illegal shader instruction."},
    {0x2B, "HSA_STATUS_ERROR_MEMORY_FAULT: The agent attempted to access an inaccessible address."},
    {0x2C, "HSA_STATUS_CU_MASK_REDUCED: The CU mask was successfully set but the mask attempted to enable a CU which was disabled for the process."},
    {0x2D, "HSA_STATUS_ERROR_OUT_OF_REGISTERS: Exceeded number of VGPRs available on this agent."},
    {0x2E, "HSA_STATUS_ERROR_RESOURCE_BUSY: Resource is busy or temporarily unavailable."},
};

hsa_status_t hsa_status_string(hsa_status_t status, const char **out) {
  hsa_status_t injected = enter(__func__, 1);
  if (injected)
    return injected;
  if (!out)
    return INVALID_ARGUMENT;
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
    if (strings[i].status == status) {
      *out = strings[i].text;
      return SUCCESS;
    }
  }
  return INVALID_ARGUMENT;
}

hsa_status_t hsa_iterate_agents(agent_cb cb, void *data) {
  ENTER();
  if (!cb)
    return INVALID_ARGUMENT;
  for (int i = 0; i <= ngpus; i++) {
    hsa_status_t r = cb((hsa_agent_t){AGENT_BASE + i}, data);
    if (r != SUCCESS)
      return r; /* INFO_BREAK included */
  }
  return SUCCESS;
}

static void put_name(void *value, const char *s) {
  char buf[64] = {0};
  snprintf(buf, sizeof buf, "%s", s);
  memcpy(value, buf, sizeof buf);
}

static void put_u32(void *value, uint32_t v) { memcpy(value, &v, 4); }

hsa_status_t hsa_agent_get_info(hsa_agent_t agent, uint32_t attr, void *value) {
  ENTER();
  int a = agent_index(agent);
  if (a < 0)
    return INVALID_AGENT;
  if (!value)
    return INVALID_ARGUMENT;
  if (a == 0) {
    switch (attr) {
    case 0: put_name(value, "fake-cpu"); return SUCCESS;
    case 1: put_name(value, "AMD"); return SUCCESS;
    case 17: put_u32(value, 0); return SUCCESS;
    case 0xA009: put_name(value, "Fake CPU"); return SUCCESS;
    default: return INVALID_ARGUMENT;
    }
  }
  switch (attr) {
  case 0: {                                          /* NAME, no features */
    char name[64], target[64];
    arch_now(target);
    snprintf(name, sizeof name, "%.*s", (int)strcspn(target, ":"), target);
    put_name(value, name);
    break;
  }
  case 1: put_name(value, "AMD"); break;             /* VENDOR_NAME */
  case 6: put_u32(value, 64); break;                 /* WAVEFRONT_SIZE */
  case 7: {                                          /* WORKGROUP_MAX_DIM */
    uint16_t d[3] = {1024, 1024, 1024};
    memcpy(value, d, sizeof d);
    break;
  }
  case 8: put_u32(value, 1024); break;               /* WORKGROUP_MAX_SIZE */
  case 9: {                                          /* GRID_MAX_DIM */
    uint32_t d[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
    memcpy(value, d, sizeof d);
    break;
  }
  case 14: put_u32(value, MAX_QUEUE_SIZE); break;    /* QUEUE_MAX_SIZE */
  case 17: put_u32(value, 1); break;                 /* DEVICE: GPU */
  case 0xA002: put_u32(value, 104); break;           /* COMPUTE_UNIT_COUNT */
  case 0xA003: put_u32(value, 1700); break;          /* MAX_CLOCK_FREQUENCY */
  case 0xA009: put_name(value, "AMD Instinct MI210 (fake)"); break;
  case 0xA00A: put_u32(value, 32); break;            /* MAX_WAVES_PER_CU */
  case 0xA016: {                                     /* TIMESTAMP_FREQUENCY */
    uint64_t f = 100000000;
    memcpy(value, &f, 8);
    break;
  }
  default: return INVALID_ARGUMENT;
  }
  return SUCCESS;
}

/* Processors: EF_AMDGPU_MACH, and the generic processor of the family
 * (its name and EF_AMDGPU_MACH), if any. */
static const struct {
  const char *name;
  unsigned mach;
  const char *generic;
  unsigned generic_mach;
} machs[] = {
    {"gfx900", 0x2c, "gfx9-generic", 0x51},   {"gfx902", 0x2d, "gfx9-generic", 0x51},
    {"gfx904", 0x2e, "gfx9-generic", 0x51},   {"gfx906", 0x2f, "gfx9-generic", 0x51},
    {"gfx909", 0x31, "gfx9-generic", 0x51},   {"gfx90c", 0x32, "gfx9-generic", 0x51},
    {"gfx908", 0x30, 0, 0},                   {"gfx90a", 0x3f, 0, 0},
    {"gfx940", 0x40, "gfx9-4-generic", 0x5f}, {"gfx941", 0x4b, "gfx9-4-generic", 0x5f},
    {"gfx942", 0x4c, "gfx9-4-generic", 0x5f}, {"gfx950", 0x4f, "gfx9-4-generic", 0x5f},
    {"gfx1010", 0x33, "gfx10-1-generic", 0x52}, {"gfx1030", 0x36, "gfx10-3-generic", 0x53},
    {"gfx1031", 0x37, "gfx10-3-generic", 0x53}, {"gfx1100", 0x41, "gfx11-generic", 0x54},
    {"gfx1101", 0x46, "gfx11-generic", 0x54},   {"gfx1102", 0x47, "gfx11-generic", 0x54},
    {"gfx1200", 0x48, "gfx12-generic", 0x59},   {"gfx1201", 0x4e, "gfx12-generic", 0x59},
};

/* The entry of machs of target ID `target`'s processor, or -1. */
static int processor_of(const char *target) {
  size_t len = strcspn(target, ":");
  for (size_t i = 0; i < sizeof machs / sizeof machs[0]; i++)
    if (strlen(machs[i].name) == len && !strncmp(machs[i].name, target, len))
      return (int)i;
  return -1;
}

/* Test control: the GPU agents' target ID from now on (as HSA_FAKE_ARCH),
 * and whether they list their family's generic ISA. */
void fake_hsa_set_arch(const char *target_id, int with_generic_isa) {
  pthread_mutex_lock(&arch_lock);
  snprintf(arch, sizeof arch, "%s", target_id);
  list_generic = with_generic_isa;
  pthread_mutex_unlock(&arch_lock);
}

/* GPU agent i's own ISA is ISA_BASE + i, its generic one GENERIC_ISA_BASE
 * + i; the CPU has none. */
#define ISA_BASE 0x15a0000ULL
#define GENERIC_ISA_BASE 0x15a1000ULL
#define ISA_PREFIX "amdgcn-amd-amdhsa--"

hsa_status_t hsa_agent_iterate_isas(hsa_agent_t agent,
                                    hsa_status_t (*cb)(hsa_isa_t, void *),
                                    void *data) {
  ENTER();
  int a = agent_index(agent);
  if (a < 0)
    return INVALID_AGENT;
  if (!cb)
    return INVALID_ARGUMENT;
  if (a == 0)
    return SUCCESS;
  /* A status other than SUCCESS (INFO_BREAK too) ends the walk. */
  char target[64];
  int listed = arch_now(target), p = processor_of(target);
  hsa_status_t r = cb((hsa_isa_t){ISA_BASE + (uint64_t)a}, data);
  if (r == SUCCESS && listed && p >= 0 && machs[p].generic)
    r = cb((hsa_isa_t){GENERIC_ISA_BASE + (uint64_t)a}, data);
  return r;
}

hsa_status_t hsa_isa_get_info_alt(hsa_isa_t isa, uint32_t attr, void *value) {
  ENTER();
  char target[64];
  int listed = arch_now(target), p = processor_of(target);
  int own = isa.handle > ISA_BASE && isa.handle <= ISA_BASE + (uint64_t)ngpus;
  int generic = listed && p >= 0 && machs[p].generic && isa.handle > GENERIC_ISA_BASE &&
                isa.handle <= GENERIC_ISA_BASE + (uint64_t)ngpus;
  if (!own && !generic)
    return INVALID_ISA;
  if (!value)
    return INVALID_ARGUMENT;
  char name[128];
  /* As current ROCr: the length counts the terminating NUL, written too.
   * The generic ISA has the agent's features. */
  int len = own ? snprintf(name, sizeof name, ISA_PREFIX "%s", target) + 1
                : snprintf(name, sizeof name, ISA_PREFIX "%s%s", machs[p].generic,
                           target + strcspn(target, ":")) + 1;
  switch (attr) {
  case 0: put_u32(value, (uint32_t)len); return SUCCESS; /* NAME_LENGTH */
  case 1: memcpy(value, name, (size_t)len); return SUCCESS; /* NAME */
  default: return INVALID_ARGUMENT;
  }
}

hsa_status_t hsa_amd_register_system_event_handler(event_cb callback, void *data) {
  ENTER();
  if (!callback)
    return INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  system_handler = callback;
  system_handler_data = data;
  pthread_mutex_unlock(&lock);
  return SUCCESS;
}

/* ---- memory pools ---- */

/* Pool j of agent a: CPU 0 kernarg + fine, CPU 1 fine, GPU 0 coarse, GPU 1
 * group segment. */
static int pool_decode(hsa_amd_memory_pool_t pool, int *a, int *j) {
  if (pool.handle < POOL_BASE)
    return 0;
  uint64_t o = pool.handle - POOL_BASE;
  if (o / 16 > (uint64_t)ngpus || o % 16 > 1)
    return 0;
  *a = (int)(o / 16);
  *j = (int)(o % 16);
  return 1;
}

hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent, pool_cb cb,
                                                void *data) {
  ENTER();
  int a = agent_index(agent);
  if (a < 0)
    return INVALID_AGENT;
  if (!cb)
    return INVALID_ARGUMENT;
  for (int j = 0; j < 2; j++) {
    hsa_status_t r = cb((hsa_amd_memory_pool_t){POOL_BASE + 16 * a + j}, data);
    if (r != SUCCESS)
      return r;
  }
  return SUCCESS;
}

hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool,
                                          uint32_t attr, void *value) {
  ENTER();
  int a, j;
  if (!pool_decode(pool, &a, &j))
    return INVALID_MEMORY_POOL;
  if (!value)
    return INVALID_ARGUMENT;
  int group = a > 0 && j == 1;
  size_t size = group ? 65536 : 64ULL << 30;
  switch (attr) {
  case 0: put_u32(value, group ? 3 : 0); break;                 /* SEGMENT */
  case 1: put_u32(value, a == 0 ? (j == 0 ? 3 : 2) : group ? 0 : 4); break;
  case 2: memcpy(value, &size, sizeof size); break;             /* SIZE */
  case 5: *(uint8_t *)value = !group; break;        /* RUNTIME_ALLOC_ALLOWED */
  case 6:                                           /* ..._GRANULE */
  case 7: size = group ? 0 : 4096; memcpy(value, &size, sizeof size); break;
  case 15: *(uint8_t *)value = a == 0; break;       /* ACCESSIBLE_BY_ALL */
  default: return INVALID_ARGUMENT;
  }
  return SUCCESS;
}

hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t pool,
                                          size_t size, uint32_t flags,
                                          void **ptr) {
  ENTER();
  (void)flags;
  int a, j;
  if (!pool_decode(pool, &a, &j))
    return INVALID_MEMORY_POOL;
  if (!ptr || !size)
    return INVALID_ARGUMENT;
  if (a > 0 && j == 1)
    return INVALID_ALLOCATION; /* the group segment */
  hsa_status_t r = OUT_OF_RESOURCES;
  pthread_mutex_lock(&lock);
  if (live_bytes <= max_alloc && size <= max_alloc - live_bytes) {
    struct alloc *m = calloc(1, sizeof *m);
    if (m && (m->base = map_zero(size))) {
      m->size = size;
      m->pool = pool.handle;
      m->next = allocs;
      allocs = m;
      live_bytes += size;
      *ptr = m->base;
      r = SUCCESS;
    } else {
      free(m);
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

hsa_status_t hsa_amd_memory_pool_free(void *ptr) {
  ENTER();
  hsa_status_t r = INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  for (struct alloc **p = &allocs; *p; p = &(*p)->next) {
    struct alloc *m = *p;
    if (m->base == ptr) {
      *p = m->next;
      live_bytes -= m->size;
      unmap(m->base, m->size);
      free(m);
      r = SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

hsa_status_t hsa_amd_agents_allow_access(uint32_t n, const hsa_agent_t *agents,
                                         const uint32_t *flags,
                                         const void *ptr) {
  ENTER();
  (void)flags;
  if (!n || !agents || !ptr)
    return INVALID_ARGUMENT;
  uint32_t bits = 0;
  for (uint32_t i = 0; i < n; i++) {
    int a = agent_index(agents[i]);
    if (a < 0)
      return INVALID_AGENT;
    bits |= 1u << a;
  }
  hsa_status_t r = INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  for (struct alloc *m = allocs; m; m = m->next) {
    if ((const char *)ptr >= m->base && (const char *)ptr < m->base + m->size) {
      m->allowed |= bits;
      r = SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

hsa_status_t hsa_amd_memory_lock(void *host, size_t size, hsa_agent_t *agents,
                                 int n, void **agent_ptr) {
  ENTER();
  if (!host || !size || !agent_ptr || n < 0 || (n > 0 && !agents) ||
      (uintptr_t)host > UINTPTR_MAX - size)
    return INVALID_ARGUMENT;
  for (int i = 0; i < n; i++)
    if (agent_index(agents[i]) < 0)
      return INVALID_AGENT;
  struct hostlock *l = calloc(1, sizeof *l);
  if (!l)
    return OUT_OF_RESOURCES;
  l->host = host;
  l->size = size;
  pthread_mutex_lock(&lock);
  l->next = locks;
  locks = l;
  pthread_mutex_unlock(&lock);
  *agent_ptr = host;
  return SUCCESS;
}

hsa_status_t hsa_amd_memory_unlock(void *host) {
  ENTER();
  hsa_status_t r = INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  for (struct hostlock **p = &locks; *p; p = &(*p)->next) {
    if ((*p)->host == host) {
      struct hostlock *l = *p;
      *p = l->next;
      free(l);
      r = SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- signals ---- */

/* The signal a handle names (doorbells included), or NULL. Call with `lock`
 * held. */
static struct sig *find_sig(uint64_t handle) {
  for (struct sig *s = signals; s; s = s->next)
    if ((uint64_t)(uintptr_t)s == handle)
      return s;
  return 0;
}

/* Wake the waiters: after any change of a signal's value. */
static void notify(void) {
  pthread_mutex_lock(&wait_lock);
  pthread_cond_broadcast(&wait_cond);
  pthread_mutex_unlock(&wait_lock);
}

/* Run the pending copies whose dependencies are all 0 (a destroyed
 * dependency counts as satisfied), in order, until none is ready. Call with
 * `lock` held. */
static void drain(void) {
  int progress = 1;
  while (progress) {
    progress = 0;
    for (struct copy **p = &pending; *p; p = &(*p)->next) {
      struct copy *c = *p;
      int ready = 1;
      for (uint32_t i = 0; i < c->ndeps && ready; i++) {
        struct sig *d = find_sig(c->deps[i]);
        ready = !d || atomic_load(&d->value) == 0;
      }
      if (!ready)
        continue;
      *p = c->next;
      if (c->size)
        memmove(c->dst, c->src, c->size);
      struct sig *done = c->done ? find_sig(c->done) : 0;
      if (done)
        atomic_fetch_sub(&done->value, 1);
      free(c->deps);
      free(c);
      progress = 1;
      break;
    }
  }
}

/* Decrement a completion signal (if any), and run what that makes ready.
 * Call with `lock` held; notify() after. */
static void complete(hsa_signal_t signal) {
  struct sig *s = signal.handle ? find_sig(signal.handle) : 0;
  if (s) {
    atomic_fetch_sub(&s->value, 1);
    drain();
  }
}

hsa_status_t hsa_signal_create(hsa_signal_value_t initial, uint32_t nconsumers,
                               const hsa_agent_t *consumers,
                               hsa_signal_t *signal) {
  ENTER();
  if (!signal || (nconsumers && !consumers))
    return INVALID_ARGUMENT;
  for (uint32_t i = 0; i < nconsumers; i++)
    if (agent_index(consumers[i]) < 0)
      return INVALID_AGENT;
  struct sig *s = calloc(1, sizeof *s);
  if (!s)
    return OUT_OF_RESOURCES;
  atomic_store(&s->value, initial);
  pthread_mutex_lock(&lock);
  s->next = signals;
  signals = s;
  pthread_mutex_unlock(&lock);
  signal->handle = (uint64_t)(uintptr_t)s;
  return SUCCESS;
}

hsa_status_t hsa_signal_destroy(hsa_signal_t signal) {
  ENTER();
  hsa_status_t r = INVALID_SIGNAL;
  pthread_mutex_lock(&lock);
  for (struct sig **p = &signals; *p; p = &(*p)->next) {
    struct sig *s = *p;
    if ((uint64_t)(uintptr_t)s == signal.handle && !s->queue) {
      *p = s->next;
      free(s);
      r = SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

static void process(struct queue *q, uint64_t doorbell);

void hsa_signal_store_screlease(hsa_signal_t signal, hsa_signal_value_t value) {
  if (!ENTER_VALUE())
    return;
  pthread_mutex_lock(&lock);
  struct sig *s = find_sig(signal.handle);
  struct queue *q = s ? s->queue : 0;
  if (s) {
    atomic_store(&s->value, value);
    if (!q)
      drain();
  }
  pthread_mutex_unlock(&lock);
  if (!s)
    invalid_handle(__func__, signal.handle);
  else if (q)
    process(q, (uint64_t)value);
  else
    notify();
}

hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t signal) {
  if (!ENTER_VALUE())
    return 0;
  pthread_mutex_lock(&lock);
  struct sig *s = find_sig(signal.handle);
  hsa_signal_value_t v = s ? atomic_load(&s->value) : 0;
  pthread_mutex_unlock(&lock);
  if (!s)
    invalid_handle(__func__, signal.handle);
  return v;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal,
                                             uint32_t cond,
                                             hsa_signal_value_t compare,
                                             uint64_t timeout_hint,
                                             uint32_t wait_state) {
  (void)wait_state;
  if (!ENTER_VALUE())
    return 0;
  pthread_mutex_lock(&lock);
  struct sig *s = find_sig(signal.handle);
  pthread_mutex_unlock(&lock);
  if (!s) {
    invalid_handle(__func__, signal.handle);
    return 0;
  }
  uint64_t start = now_ns();
  hsa_signal_value_t v;
  pthread_mutex_lock(&wait_lock);
  for (;;) {
    v = atomic_load(&s->value);
    if (cond > 3 || (cond == 0 && v == compare) || (cond == 1 && v != compare) ||
        (cond == 2 && v < compare) || (cond == 3 && v >= compare))
      break;
    uint64_t spent = now_ns() - start;
    if (spent >= timeout_hint)
      break;
    uint64_t slice = timeout_hint - spent;
    if (slice > 10000000)
      slice = 10000000; /* look again every 10 ms regardless */
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += (long)slice;
    t.tv_sec += t.tv_nsec / 1000000000;
    t.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&wait_cond, &wait_lock, &t);
  }
  pthread_mutex_unlock(&wait_lock);
  return v;
}

/* ---- memory copies and fills ---- */

hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent,
                                       const void *src, hsa_agent_t src_agent,
                                       size_t size, uint32_t ndeps,
                                       const hsa_signal_t *deps,
                                       hsa_signal_t done) {
  ENTER();
  if (agent_index(dst_agent) < 0 || agent_index(src_agent) < 0)
    return INVALID_AGENT;
  if (!dst || !src || (ndeps && !deps))
    return INVALID_ARGUMENT;
  struct copy *c = calloc(1, sizeof *c);
  uint64_t *d = calloc(ndeps ? ndeps : 1, sizeof *d);
  if (!c || !d) {
    free(c);
    free(d);
    return OUT_OF_RESOURCES;
  }
  hsa_status_t r = SUCCESS;
  pthread_mutex_lock(&lock);
  if (!tracked(dst, size, 1) || !tracked(src, size, 1))
    r = INVALID_ARGUMENT; /* e.g. pageable host memory */
  for (uint32_t i = 0; i < ndeps && !r; i++)
    if (!find_sig((d[i] = deps[i].handle)))
      r = INVALID_SIGNAL;
  if (!r && done.handle && !find_sig(done.handle))
    r = INVALID_SIGNAL;
  if (!r) {
    *c = (struct copy){0, dst, src, size, ndeps, d, done.handle};
    struct copy **tail = &pending;
    while (*tail)
      tail = &(*tail)->next;
    *tail = c;
    drain();
  }
  pthread_mutex_unlock(&lock);
  if (r) {
    free(c);
    free(d);
  } else {
    notify();
  }
  return r;
}

hsa_status_t hsa_amd_memory_fill(void *ptr, uint32_t value, size_t count) {
  ENTER();
  if (!ptr || (uintptr_t)ptr % 4 || count > SIZE_MAX / 4)
    return INVALID_ARGUMENT;
  hsa_status_t r = INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  if (tracked(ptr, count * 4, 0)) {
    for (size_t i = 0; i < count; i++)
      ((uint32_t *)ptr)[i] = value;
    r = SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- queues ---- */

static struct queue *find_queue(const hsa_queue_t *queue) {
  for (struct queue *q = queues; q; q = q->next)
    if (&q->q == queue)
      return q;
  return 0;
}

hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, uint32_t type,
                              queue_cb callback, void *data, uint32_t priv,
                              uint32_t group, hsa_queue_t **out) {
  ENTER();
  (void)priv, (void)group;
  int a = agent_index(agent);
  if (a < 0)
    return INVALID_AGENT;
  if (a == 0)
    return INVALID_QUEUE_CREATION; /* CPU agents have no AQL queues */
  if (!out || type > 1 || !size || (size & (size - 1)) || size > MAX_QUEUE_SIZE)
    return INVALID_ARGUMENT;
  struct queue *q = calloc(1, sizeof *q);
  struct sig *bell = calloc(1, sizeof *bell);
  packet_t *ring = aligned_alloc(64, (size_t)size * sizeof(packet_t));
  if (!q || !bell || !ring) {
    free(q);
    free(bell);
    free(ring);
    return OUT_OF_RESOURCES;
  }
  memset(ring, 0, (size_t)size * sizeof(packet_t));
  for (uint32_t i = 0; i < size; i++)
    ring[i].header = PACKET_INVALID;
  bell->queue = q;
  q->callback = callback;
  q->data = data;
  q->agent = a;
  q->doorbell = bell;
  pthread_mutex_init(&q->proc, 0);
  pthread_mutex_lock(&lock);
  q->q = (hsa_queue_t){type, 1, ring, {(uint64_t)(uintptr_t)bell}, size, 0,
                       next_id++};
  bell->next = signals;
  signals = bell;
  q->next = queues;
  queues = q;
  pthread_mutex_unlock(&lock);
  *out = &q->q;
  return SUCCESS;
}

hsa_status_t hsa_queue_destroy(hsa_queue_t *queue) {
  ENTER();
  pthread_mutex_lock(&lock);
  struct queue *q = 0;
  for (struct queue **p = &queues; *p; p = &(*p)->next) {
    if (&(*p)->q == queue) {
      q = *p;
      *p = q->next;
      break;
    }
  }
  for (struct sig **p = &signals; q && *p; p = &(*p)->next) {
    if (*p == q->doorbell) {
      *p = q->doorbell->next;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  if (!q)
    return INVALID_QUEUE;
  pthread_mutex_destroy(&q->proc);
  free(q->q.base_address);
  free(q->doorbell);
  free(q);
  return SUCCESS;
}

uint64_t hsa_queue_add_write_index_relaxed(const hsa_queue_t *queue,
                                           uint64_t value) {
  if (!ENTER_VALUE())
    return 0;
  pthread_mutex_lock(&lock);
  struct queue *q = find_queue(queue);
  uint64_t old = q ? atomic_fetch_add(&q->write_index, value) : 0;
  pthread_mutex_unlock(&lock);
  if (!q)
    invalid_handle(__func__, (uint64_t)(uintptr_t)queue);
  return old;
}

uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t *queue) {
  if (!ENTER_VALUE())
    return 0;
  pthread_mutex_lock(&lock);
  struct queue *q = find_queue(queue);
  uint64_t r = q ? atomic_load(&q->read_index) : 0;
  pthread_mutex_unlock(&lock);
  if (!q)
    invalid_handle(__func__, (uint64_t)(uintptr_t)queue);
  return r;
}

/* Check, record and run one kernel dispatch of queue `q`. Returns 0 or the
 * error to report. Call with `lock` held. */
static hsa_status_t dispatch(struct queue *q, const packet_t *p) {
  struct symbol *k = symbols;
  while (k && !(k->kind == KIND_KERNEL &&
                KERNEL_OBJECT_BASE + 64 * k->id == p->kernel_object))
    k = k->next;
  if (!k || !k->exec->frozen || k->agent != q->agent)
    return ERROR; /* unknown, destroyed, unfrozen or another agent's kernel */
  unsigned dims = p->setup & 3;
  if (dims < 1 || !p->workgroup_size_x || !p->workgroup_size_y ||
      !p->workgroup_size_z ||
      (uint32_t)p->workgroup_size_x * p->workgroup_size_y *
              p->workgroup_size_z > 1024 ||
      !p->grid_size_x || !p->grid_size_y || !p->grid_size_z ||
      p->group_segment_size < k->group || p->private_segment_size < k->priv)
    return INVALID_PACKET_FORMAT;
  const unsigned char *args = (const unsigned char *)(uintptr_t)p->kernarg_address;
  if (k->kernarg && !tracked(args, k->kernarg, 1))
    return MEMORY_APERTURE_VIOLATION;
  size_t n = k->kernarg < KERNARG_RECORD ? k->kernarg : KERNARG_RECORD;
  last.count++;
  last.packet = *p;
  size_t len = strlen(k->name) - 3; /* without ".kd" */
  snprintf(last.name, sizeof last.name, "%.*s", (int)len, k->name);
  memset(last.kernarg, 0, sizeof last.kernarg);
  if (n)
    memcpy(last.kernarg, args, n);
  last.kernarg_size = n;
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
    if (strlen(kernels[i].name) == len && !strncmp(kernels[i].name, k->name, len))
      return kernels[i].fn(p, last.kernarg, n);
  return SUCCESS; /* a kernel the fake cannot run: nothing to do */
}

/* A doorbell rang with `doorbell` (the ID of the packet it announces):
 * process what the queue holds. */
static void process(struct queue *q, uint64_t doorbell) {
  hsa_status_t err = SUCCESS;
  pthread_mutex_lock(&q->proc);
  while (!q->dead) {
    uint64_t r = atomic_load(&q->read_index), w = atomic_load(&q->write_index);
    if (r >= w)
      break;
    packet_t *slot = (packet_t *)q->q.base_address + (r & (q->q.size - 1));
    uint16_t header = __atomic_load_n(&slot->header, __ATOMIC_ACQUIRE);
    if ((header & 0xff) == PACKET_INVALID) {
      if (r == doorbell)
        err = ERROR; /* the doorbell names a packet never published */
      break;         /* else another thread has yet to publish it */
    }
    if ((header & 0xff) != PACKET_KERNEL_DISPATCH) {
      err = ERROR; /* barriers, agent dispatches: not supported */
      break;
    }
    packet_t p;
    memcpy(&p, slot, sizeof p);
    pthread_mutex_lock(&lock);
    err = dispatch(q, &p);
    if (!err) {
      __atomic_store_n(&slot->header, (uint16_t)((header & ~0xff) | PACKET_INVALID),
                       __ATOMIC_RELEASE);
      atomic_store(&q->read_index, r + 1);
      complete(p.completion_signal);
    }
    pthread_mutex_unlock(&lock);
    notify();
    if (err)
      break;
  }
  if (err)
    q->dead = 1;
  queue_cb callback = q->callback;
  void *data = q->data;
  pthread_mutex_lock(&lock);
  event_cb handler = system_handler;
  void *handler_data = system_handler_data;
  struct {
    uint32_t type;
    uint64_t agent, address;
    uint32_t reasons;
  } event = {0, AGENT_BASE + (uint64_t)q->agent, page_fault_address, 1};
  pthread_mutex_unlock(&lock);
  pthread_mutex_unlock(&q->proc);
  if (err == PAGE_FAULT) {
    /* ROCr aborts the process when nobody handles a memory fault. */
    if (!handler || handler(&event, handler_data) != SUCCESS) {
      fprintf(stderr, "fake_hsa: unhandled GPU memory fault at %#llx\n",
              (unsigned long long)event.address);
      abort();
    }
  } else if (err && callback) {
    callback(err, &q->q, data);
  }
}

/* ---- code objects and executables ---- */

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

enum { SHT_SYMTAB = 2, SHT_NOBITS = 8, SHT_DYNSYM = 11, STT_OBJECT = 1 };

/* Copy `len` bytes at `off` of the image (b, n) to `out`, if in bounds. */
static int rd(const unsigned char *b, size_t n, uint64_t off, void *out,
              size_t len) {
  if (off > n || len > n - off)
    return 0;
  memcpy(out, b + off, len);
  return 1;
}

/* Section i, checked: its contents (but for NOBITS) lie in the image. */
static int section(const unsigned char *b, size_t n, const Elf64Header *h,
                   unsigned i, Elf64Section *s) {
  if (i >= h->shnum || !rd(b, n, h->shoff + (uint64_t)i * sizeof *s, s, sizeof *s))
    return 0;
  return s->type == SHT_NOBITS || (s->offset <= n && s->size <= n - s->offset);
}

/* An AMDGPU ELF64 little-endian image whose section table and sections lie
 * in it. */
static int elf_valid(const unsigned char *b, size_t n, Elf64Header *h) {
  if (!rd(b, n, 0, h, sizeof *h) || memcmp(h->ident, "\177ELF", 4) ||
      h->ident[4] != 2 || h->ident[5] != 1 || h->machine != 224)
    return 0;
  if (h->shnum && h->shentsize != sizeof(Elf64Section))
    return 0;
  if (h->shoff > n || (uint64_t)h->shnum * sizeof(Elf64Section) > n - h->shoff)
    return 0;
  for (unsigned i = 0; i < h->shnum; i++) {
    Elf64Section s;
    if (!section(b, n, h, i, &s))
      return 0;
  }
  return 1;
}


/* Whether target ID `target` sets `feature` to `sign` ('+' or '-'). */
static int target_sets(const char *target, const char *feature, char sign) {
  char want[16];
  snprintf(want, sizeof want, ":%s%c", feature, sign);
  size_t n = strlen(want);
  for (const char *at = strstr(target, want); at; at = strstr(at + 1, want))
    if (at[n] == 0 || at[n] == ':')
      return 1;
  return 0;
}

/* Whether the code object's xnack and sramecc settings (e_flags bits 8-9
 * and 10-11 from code object version 4, EI_ABIVERSION 2, on: 0
 * unsupported, 1 any, 2 off, 3 on) suit the agents' target ID. */
static int features_fit(const Elf64Header *h) {
  if (h->ident[8] < 2)
    return 1;
  char target[64];
  arch_now(target);
  static const struct { const char *name; int shift; } features[] = {
      {"xnack", 8}, {"sramecc", 10}};
  for (size_t i = 0; i < 2; i++) {
    unsigned v = (h->flags >> features[i].shift) & 3;
    if ((v == 2 && !target_sets(target, features[i].name, '-')) ||
        (v == 3 && !target_sets(target, features[i].name, '+')))
      return 0;
  }
  return 1;
}

/* Whether the agents' processor runs the code object's: the same, or its
 * family's generic processor with a generic version of at least 1 (code
 * object version 6, EI_ABIVERSION 4, and later), as ROCr does; a runtime
 * that does not list generic ISAs does not know them. */
static int processor_fits(const Elf64Header *h) {
  char target[64];
  int listed = arch_now(target), p = processor_of(target);
  if (p < 0)
    return 0;
  unsigned mach = h->flags & 0xff;
  if (mach == machs[p].mach)
    return 1;
  return listed && machs[p].generic && mach == machs[p].generic_mach &&
         h->ident[8] >= 4 && (h->flags >> 24) >= 1;
}

static void free_symbol(struct symbol *s) {
  unmap(s->addr, s->size);
  free(s->name);
  free(s);
}

/* Read the image's symbols into a list for (x, agent); NULL with *err set
 * on failure. */
static struct symbol *load_symbols(struct exec *x, int agent,
                                   const unsigned char *b, size_t n,
                                   hsa_status_t *err) {
  Elf64Header h;
  Elf64Section tab = {0}, str, sec;
  struct symbol *list = 0;
  *err = INVALID_CODE_OBJECT;
  if (!elf_valid(b, n, &h))
    return 0;
  int found = 0;
  for (int want = SHT_SYMTAB; !found && want; want = want == SHT_SYMTAB ? SHT_DYNSYM : 0)
    for (unsigned i = 0; i < h.shnum && !found; i++)
      found = section(b, n, &h, i, &tab) && tab.type == (uint32_t)want;
  if (!found) {
    *err = SUCCESS; /* no symbols: nothing to load */
    return 0;
  }
  if (!section(b, n, &h, tab.link, &str) || str.type == SHT_NOBITS)
    return 0;
  const char *names = (const char *)b + str.offset;
  for (uint64_t j = 0; j < tab.size / sizeof(Elf64Symbol); j++) {
    Elf64Symbol sym;
    if (!rd(b, n, tab.offset + j * sizeof sym, &sym, sizeof sym))
      goto fail;
    if (sym.name >= str.size || !memchr(names + sym.name, 0, str.size - sym.name))
      continue; /* no name, or one running off its table */
    if (sym.shndx == 0 || sym.shndx >= 0xff00)
      continue; /* undefined, absolute, common */
    const char *name = names + sym.name;
    size_t len = strlen(name), bind = sym.info >> 4;
    int kernel = len > 3 && !strcmp(name + len - 3, ".kd");
    if (!kernel && ((sym.info & 0xf) != STT_OBJECT || !sym.size ||
                    (bind != 1 && bind != 2)))
      continue;
    if (!section(b, n, &h, sym.shndx, &sec) || sym.value < sec.addr)
      goto fail;
    uint64_t off = sym.value - sec.addr, size = kernel ? 64 : sym.size;
    if (off > sec.size || size > sec.size - off || size > MAX_VARIABLE)
      goto fail;
    if (kernel && sec.type == SHT_NOBITS)
      goto fail;
    struct symbol *s = calloc(1, sizeof *s);
    if (!s || !(s->name = strdup(name)) ||
        (!kernel && !(s->addr = map_zero(size)))) {
      if (s)
        free_symbol(s);
      *err = OUT_OF_RESOURCES;
      goto fail;
    }
    s->next = list;
    list = s;
    s->id = next_id++;
    s->exec = x;
    s->agent = agent;
    s->kind = kernel ? KIND_KERNEL : KIND_VARIABLE;
    if (kernel) {
      uint32_t kd[3];
      memcpy(kd, b + sec.offset + off, sizeof kd);
      s->group = kd[0];
      s->priv = kd[1];
      s->kernarg = kd[2];
    } else {
      s->size = size;
      if (sec.type != SHT_NOBITS)
        memcpy(s->addr, b + sec.offset + off, size);
    }
  }
  *err = SUCCESS;
  return list;
fail:
  while (list) {
    struct symbol *next = list->next;
    free_symbol(list);
    list = next;
  }
  return 0;
}

hsa_status_t hsa_code_object_reader_create_from_memory(
    const void *code, size_t size, hsa_code_object_reader_t *out) {
  ENTER();
  Elf64Header h;
  if (!code || !size || !out)
    return INVALID_ARGUMENT;
  if (!elf_valid(code, size, &h))
    return INVALID_CODE_OBJECT;
  struct reader *r = calloc(1, sizeof *r);
  if (!r || !(r->bytes = malloc(size))) {
    free(r);
    return OUT_OF_RESOURCES;
  }
  memcpy(r->bytes, code, size);
  r->size = size;
  pthread_mutex_lock(&lock);
  r->id = next_id++;
  r->next = readers;
  readers = r;
  pthread_mutex_unlock(&lock);
  out->handle = r->id;
  return SUCCESS;
}

hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t reader) {
  ENTER();
  hsa_status_t r = INVALID_CODE_OBJECT_READER;
  pthread_mutex_lock(&lock);
  for (struct reader **p = &readers; *p; p = &(*p)->next) {
    if ((*p)->id == reader.handle) {
      struct reader *x = *p;
      *p = x->next;
      free(x->bytes);
      free(x);
      r = SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

static struct exec *find_exec(uint64_t id) {
  struct exec *x = execs;
  while (x && x->id != id)
    x = x->next;
  return x;
}

hsa_status_t hsa_executable_create_alt(uint32_t profile, uint32_t rounding,
                                       const char *options,
                                       hsa_executable_t *out) {
  ENTER();
  (void)options;
  if (profile > 1 || rounding > 2 || !out)
    return INVALID_ARGUMENT;
  struct exec *x = calloc(1, sizeof *x);
  if (!x)
    return OUT_OF_RESOURCES;
  pthread_mutex_lock(&lock);
  x->id = next_id++;
  x->next = execs;
  execs = x;
  pthread_mutex_unlock(&lock);
  out->handle = x->id;
  return SUCCESS;
}

hsa_status_t hsa_executable_load_agent_code_object(
    hsa_executable_t executable, hsa_agent_t agent,
    hsa_code_object_reader_t reader, const char *options,
    hsa_loaded_code_object_t *loaded) {
  ENTER();
  (void)options;
  hsa_status_t r = SUCCESS;
  pthread_mutex_lock(&lock);
  struct exec *x = find_exec(executable.handle);
  struct reader *rd = readers;
  while (rd && rd->id != reader.handle)
    rd = rd->next;
  int a = agent_index(agent);
  Elf64Header h;
  if (!x)
    r = INVALID_EXECUTABLE;
  else if (!rd)
    r = INVALID_CODE_OBJECT_READER;
  else if (a <= 0)
    r = INVALID_AGENT;
  else if (x->frozen)
    r = FROZEN_EXECUTABLE;
  else if (!elf_valid(rd->bytes, rd->size, &h))
    r = INVALID_CODE_OBJECT;
  else if (!processor_fits(&h) || !features_fit(&h))
    r = INVALID_ISA;
  if (!r) {
    struct symbol *list = load_symbols(x, a, rd->bytes, rd->size, &r);
    while (list) {
      struct symbol *next = list->next;
      list->next = symbols;
      symbols = list;
      list = next;
    }
    if (!r && loaded)
      loaded->handle = next_id++;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

hsa_status_t hsa_executable_freeze(hsa_executable_t executable,
                                   const char *options) {
  ENTER();
  (void)options;
  hsa_status_t r = SUCCESS;
  pthread_mutex_lock(&lock);
  struct exec *x = find_exec(executable.handle);
  if (!x)
    r = INVALID_EXECUTABLE;
  else if (x->frozen)
    r = FROZEN_EXECUTABLE;
  else
    x->frozen = 1;
  pthread_mutex_unlock(&lock);
  return r;
}

hsa_status_t hsa_executable_destroy(hsa_executable_t executable) {
  ENTER();
  hsa_status_t r = INVALID_EXECUTABLE;
  pthread_mutex_lock(&lock);
  for (struct exec **p = &execs; *p; p = &(*p)->next) {
    struct exec *x = *p;
    if (x->id != executable.handle)
      continue;
    *p = x->next;
    for (struct symbol **s = &symbols; *s;) {
      struct symbol *sym = *s;
      if (sym->exec == x) {
        *s = sym->next;
        free_symbol(sym);
      } else {
        s = &sym->next;
      }
    }
    free(x);
    r = SUCCESS;
    break;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t executable,
                                               const char *name,
                                               const hsa_agent_t *agent,
                                               hsa_executable_symbol_t *out) {
  ENTER();
  if (!name || !out)
    return INVALID_ARGUMENT;
  int a = agent ? agent_index(*agent) : -1;
  if (agent && a < 0)
    return INVALID_AGENT;
  hsa_status_t r = INVALID_SYMBOL_NAME;
  pthread_mutex_lock(&lock);
  struct exec *x = find_exec(executable.handle);
  if (!x)
    r = INVALID_EXECUTABLE;
  for (struct symbol *s = symbols; x && s; s = s->next) {
    if (s->exec == x && (a < 0 || s->agent == a) && !strcmp(s->name, name)) {
      out->handle = s->id;
      r = SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t symbol,
                                            uint32_t attr, void *value) {
  ENTER();
  if (!value)
    return INVALID_ARGUMENT;
  hsa_status_t r = SUCCESS;
  pthread_mutex_lock(&lock);
  struct symbol *s = symbols;
  while (s && s->id != symbol.handle)
    s = s->next;
  int kernel = s && s->kind == KIND_KERNEL;
  uint64_t u64;
  if (!s) {
    r = INVALID_EXECUTABLE_SYMBOL;
  } else if (attr == 0) { /* TYPE */
    put_u32(value, (uint32_t)s->kind);
  } else if (attr == 1) { /* NAME_LENGTH */
    put_u32(value, (uint32_t)strlen(s->name));
  } else if (attr == 2) { /* NAME, not terminated */
    memcpy(value, s->name, strlen(s->name));
  } else if (attr == 20) { /* AGENT */
    u64 = AGENT_BASE + (uint64_t)s->agent;
    memcpy(value, &u64, 8);
  } else if (!kernel && attr == 21) { /* VARIABLE_ADDRESS */
    u64 = (uint64_t)(uintptr_t)s->addr;
    memcpy(value, &u64, 8);
  } else if (!kernel && attr == 9) { /* VARIABLE_SIZE */
    put_u32(value, (uint32_t)s->size);
  } else if (kernel && attr == 22) { /* KERNEL_OBJECT */
    u64 = KERNEL_OBJECT_BASE + 64 * s->id;
    memcpy(value, &u64, 8);
  } else if (kernel && attr == 11) { /* KERNARG_SEGMENT_SIZE */
    put_u32(value, s->kernarg);
  } else if (kernel && attr == 12) { /* KERNARG_SEGMENT_ALIGNMENT */
    put_u32(value, 16);
  } else if (kernel && attr == 13) { /* GROUP_SEGMENT_SIZE */
    put_u32(value, s->group);
  } else if (kernel && attr == 14) { /* PRIVATE_SEGMENT_SIZE */
    put_u32(value, s->priv);
  } else if (kernel && attr == 15) { /* DYNAMIC_CALLSTACK */
    *(uint8_t *)value = 0;
  } else {
    r = INVALID_ARGUMENT;
  }
  pthread_mutex_unlock(&lock);
  return r;
}
