/* The omp_* and ompx_* routines device code may call. Teams are blocks,
 * threads of the innermost region come from parallel.c, ICVs from state.c.
 * Settings a device cannot change (dynamic adjustment, nesting, places,
 * binding, default device, pausing) answer with the fixed value. */
#include "state.h"

/* omp_sched_t and omp_proc_bind_t values from omp.h. */
enum { OMP_SCHED_MONOTONIC = (int)0x80000000u, OMP_PROC_BIND_FALSE = 0 };

/* --- threads and levels ------------------------------------------------------- */

RTL_EXPORT int omp_get_thread_num(void) { return (int)rtl_thread_num(); }
RTL_EXPORT int omp_get_num_threads(void) { return (int)rtl_num_threads(); }
RTL_EXPORT int omp_get_level(void) { return (int)rtl_level(); }
RTL_EXPORT int omp_get_active_level(void) { return (int)rtl_active_level(); }
RTL_EXPORT int omp_in_parallel(void) { return rtl_active_level() > 0; }
RTL_EXPORT int omp_get_thread_limit(void) { return (int)rtl_max_team_threads(); }

/* Threads the next parallel region would get: nthreads-var, else all the
 * team's (regions inside a region are serialised, but the ICV is what the
 * routine reports). */
RTL_EXPORT int omp_get_max_threads(void) {
  uint32_t n = rtl_icvs().nthreads;
  return (int)(n ? n : rtl_max_team_threads());
}

RTL_EXPORT void omp_set_num_threads(int n) { rtl_set_nthreads(n > 0 ? (uint32_t)n : 0); }

/* Only level 1 can be active: an ancestor's thread number is the thread's
 * own at the active level and 0 at any inactive one. */
RTL_EXPORT int omp_get_ancestor_thread_num(int level) {
  int current = (int)rtl_level();
  if (level < 0 || level > current)
    return -1;
  if (level == current)
    return (int)rtl_thread_num();
  if (level == 1 && rtl_team_active_level())
    return (int)plat_thread_id();
  return 0;
}

RTL_EXPORT int omp_get_team_size(int level) {
  int current = (int)rtl_level();
  if (level < 0 || level > current)
    return -1;
  if (level == current)
    return (int)rtl_num_threads();
  if (level == 1 && rtl_team_active_level())
    return (int)rtl_team_size();
  return 1;
}

RTL_EXPORT int omp_get_max_active_levels(void) { return (int)rtl_icvs().max_active_levels; }

/* One active level is all a device supports. */
RTL_EXPORT void omp_set_max_active_levels(int levels) {
  rtl_set_max_active_levels(levels > 0 ? 1 : 0);
}

RTL_EXPORT int omp_get_supported_active_levels(void) { return 1; }

RTL_EXPORT void omp_set_dynamic(int enable) {}
RTL_EXPORT int omp_get_dynamic(void) { return 0; }
RTL_EXPORT void omp_set_nested(int enable) {}
RTL_EXPORT int omp_get_nested(void) { return 0; }

RTL_EXPORT void omp_set_schedule(int kind, int chunk) { rtl_set_schedule((uint32_t)kind, chunk); }

RTL_EXPORT void omp_get_schedule(int *kind, int *chunk) {
  uint32_t k;
  int32_t c;
  rtl_run_schedule(&k, &c);
  *kind = (int)k;
  *chunk = c;
}

RTL_EXPORT int omp_get_proc_bind(void) { return OMP_PROC_BIND_FALSE; }
RTL_EXPORT int omp_get_num_places(void) { return 0; }
RTL_EXPORT int omp_get_place_num(void) { return -1; }
RTL_EXPORT int omp_get_partition_num_places(void) { return 0; }
RTL_EXPORT int omp_get_cancellation(void) { return 0; }

/* --- teams and devices ------------------------------------------------------------ */

RTL_EXPORT int omp_get_team_num(void) { return (int)rtl_team_num(); }
RTL_EXPORT int omp_get_num_teams(void) { return (int)rtl_num_teams(); }
RTL_EXPORT int omp_is_initial_device(void) { return 0; }

/* The host is device number omp_get_num_devices() (OpenMP 5.2 §18.7.7). */
RTL_EXPORT int omp_get_initial_device(void) {
  return (int)rtl_device_environment()->NumDevices;
}

RTL_EXPORT int omp_get_num_devices(void) { return (int)rtl_device_environment()->NumDevices; }
RTL_EXPORT int omp_get_device_num(void) { return (int)rtl_device_environment()->DeviceNum; }

RTL_EXPORT int omp_get_num_procs(void) {
  uint64_t procs = rtl_device_environment()->HardwareParallelism;
  return procs ? (int)procs : (int)(plat_num_blocks() * plat_block_size());
}

RTL_EXPORT void omp_set_default_device(int device) {}
RTL_EXPORT int omp_get_default_device(void) { return (int)rtl_device_environment()->DeviceNum; }

/* Nothing to pause on a device: report failure (non-zero). */
RTL_EXPORT int omp_pause_resource(int kind, int device) { return -1; }
RTL_EXPORT int omp_pause_resource_all(int kind) { return -1; }

/* --- time ------------------------------------------------------------------------- */

RTL_EXPORT double omp_get_wtime(void) { return (double)plat_nanoseconds() * 1.0e-9; }
RTL_EXPORT double omp_get_wtick(void) { return plat_tick_seconds(); }

/* --- ompx: the hardware ids (kernels are one-dimensional) ------------------------ */

RTL_EXPORT int ompx_thread_id(int dim) { return dim == 0 ? (int)plat_thread_id() : 0; }
RTL_EXPORT int ompx_block_id(int dim) { return dim == 0 ? (int)plat_block_id() : 0; }
RTL_EXPORT int ompx_block_dim(int dim) { return dim == 0 ? (int)plat_block_size() : 1; }
RTL_EXPORT int ompx_grid_dim(int dim) { return dim == 0 ? (int)plat_num_blocks() : 1; }

RTL_EXPORT int ompx_thread_id_x(void) { return ompx_thread_id(0); }
RTL_EXPORT int ompx_thread_id_y(void) { return ompx_thread_id(1); }
RTL_EXPORT int ompx_thread_id_z(void) { return ompx_thread_id(2); }
RTL_EXPORT int ompx_block_id_x(void) { return ompx_block_id(0); }
RTL_EXPORT int ompx_block_id_y(void) { return ompx_block_id(1); }
RTL_EXPORT int ompx_block_id_z(void) { return ompx_block_id(2); }
RTL_EXPORT int ompx_block_dim_x(void) { return ompx_block_dim(0); }
RTL_EXPORT int ompx_block_dim_y(void) { return ompx_block_dim(1); }
RTL_EXPORT int ompx_block_dim_z(void) { return ompx_block_dim(2); }
RTL_EXPORT int ompx_grid_dim_x(void) { return ompx_grid_dim(0); }
RTL_EXPORT int ompx_grid_dim_y(void) { return ompx_grid_dim(1); }
RTL_EXPORT int ompx_grid_dim_z(void) { return ompx_grid_dim(2); }

RTL_EXPORT int ompx_shfl_down_sync_i(uint64_t mask, int value, unsigned delta, int width) {
  return plat_shfl_down_i32(mask, value, delta, (uint32_t)width);
}

RTL_EXPORT long ompx_shfl_down_sync_l(uint64_t mask, long value, unsigned delta, int width) {
  uint64_t bits = (uint64_t)value;
  uint32_t lo = (uint32_t)plat_shfl_down_i32(mask, (int32_t)bits, delta, (uint32_t)width);
  uint32_t hi = (uint32_t)plat_shfl_down_i32(mask, (int32_t)(bits >> 32), delta, (uint32_t)width);
  return (long)(((uint64_t)hi << 32) | lo);
}

RTL_EXPORT float ompx_shfl_down_sync_f(uint64_t mask, float value, unsigned delta, int width) {
  union { float f; int32_t i; } u = {.f = value};
  u.i = plat_shfl_down_i32(mask, u.i, delta, (uint32_t)width);
  return u.f;
}

RTL_EXPORT double ompx_shfl_down_sync_d(uint64_t mask, double value, unsigned delta, int width) {
  union { double d; long l; } u = {.d = value};
  u.l = ompx_shfl_down_sync_l(mask, u.l, delta, width);
  return u.d;
}

/* --- memory allocators ------------------------------------------------------------ */

/* omp_allocator_handle_t values of the predefined allocators served from the
 * device heap (null = default); the team and thread kinds get NULL. */
enum { OMP_NULL_ALLOCATOR = 0, OMP_LOW_LAT_MEM_ALLOC = 5 };

static bool heap_allocator(uintptr_t allocator) { return allocator <= OMP_LOW_LAT_MEM_ALLOC; }

RTL_EXPORT void *omp_alloc(size_t size, uintptr_t allocator) {
  return heap_allocator(allocator) ? rtl_heap_alloc(size) : NULL;
}

RTL_EXPORT void omp_free(void *ptr, uintptr_t allocator) { rtl_heap_free(ptr); }

/* What clang emits for the allocate directive and clause. */
RTL_EXPORT void *__kmpc_alloc(int32_t gtid, size_t size, uintptr_t allocator) {
  return omp_alloc(size, allocator);
}

RTL_EXPORT void __kmpc_free(int32_t gtid, void *ptr, uintptr_t allocator) { rtl_heap_free(ptr); }

/* --- declare target indirect --------------------------------------------------------- */

/* The host writes a table of {host address, device address} sorted by host
 * address; an address not in it is already a device one. */
typedef struct IndirectCallEntry {
  void *host;
  void *device;
} IndirectCallEntry;

RTL_EXPORT void *__llvm_omp_indirect_call_lookup(void *host_ptr) {
  const DeviceEnvironmentTy *env = rtl_device_environment();
  const IndirectCallEntry *table = (const IndirectCallEntry *)env->IndirectCallTable;
  uint64_t low = 0, high = table ? env->IndirectCallTableSize : 0;
  while (low < high) {
    uint64_t mid = low + (high - low) / 2;
    if ((uintptr_t)table[mid].host < (uintptr_t)host_ptr)
      low = mid + 1;
    else
      high = mid;
  }
  return table && low < env->IndirectCallTableSize && table[low].host == host_ptr
             ? table[low].device
             : host_ptr;
}
