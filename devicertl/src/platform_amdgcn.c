/* platform.h for AMD GPUs (amdgcn-amd-amdhsa), built without -mcpu: the
 * wavefront size and the clock instruction are settled when the program's
 * own -mcpu lowers the bitcode.
 *
 * A wavefront executes in lockstep, so nothing here may make one lane wait
 * for another lane of the same wavefront. */
#if defined(__AMDGPU__)

#include "rtl.h"

/* Dynamic LDS: an external zero-sized LDS array is placed after the
 * kernel's static LDS, where the launch's dynamic group segment starts. */
extern __attribute__((address_space(3), aligned(16))) unsigned char __omp_rtl_dyn_shared[];

/* Offset of group_segment_size in the HSA kernel dispatch packet. */
enum { HSA_DISPATCH_GROUP_SEGMENT_SIZE = 28 };
/* s_memrealtime / the gfx11 REALTIME message tick at 100 MHz. */
#define AMDGCN_DEFAULT_CLOCK_HZ 100000000ull

uint32_t plat_thread_id(void) { return __builtin_amdgcn_workitem_id_x(); }
uint32_t plat_block_size(void) { return __builtin_amdgcn_workgroup_size_x(); }
uint32_t plat_block_id(void) { return __builtin_amdgcn_workgroup_id_x(); }

uint32_t plat_num_blocks(void) {
  uint32_t size = __builtin_amdgcn_workgroup_size_x();
  return (__builtin_amdgcn_grid_size_x() + size - 1) / size;
}

uint32_t plat_warp_size(void) { return __builtin_amdgcn_wavefrontsize(); }

uint32_t plat_lane_id(void) {
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
}

uint64_t plat_active_mask(void) { return __builtin_amdgcn_read_exec(); }

/* Lanes of a wavefront are never apart; this only keeps the optimiser from
 * moving code across the point. */
RTL_CONVERGENT void plat_sync_warp(uint64_t mask) { __builtin_amdgcn_wave_barrier(); }

/* ds_bpermute reads `value` from the lane whose index is address / 4. */
static int32_t read_lane(uint32_t lane, int32_t value) {
  return __builtin_amdgcn_ds_bpermute((int)(lane << 2), value);
}

RTL_CONVERGENT int32_t plat_shfl_down_i32(uint64_t mask, int32_t value, uint32_t delta,
                                          uint32_t width) {
  uint32_t lane = plat_lane_id();
  uint32_t in_segment = lane & (width - 1);
  uint32_t source = in_segment + delta < width ? lane + delta : lane;
  return read_lane(source, value);
}

RTL_CONVERGENT int32_t plat_shfl_idx_i32(uint64_t mask, int32_t value, uint32_t src_lane,
                                         uint32_t width) {
  uint32_t segment_start = plat_lane_id() & ~(width - 1);
  return read_lane(segment_start + (src_lane & (width - 1)), value);
}

RTL_CONVERGENT void plat_sync_block(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

/* s_barrier always waits for every wavefront of the workgroup, so a barrier
 * of some threads is the runtime's counter barrier (sync.c). */
RTL_CONVERGENT void plat_sync_block_partial(uint32_t num_threads) {
  rtl_counter_barrier(num_threads);
}

void plat_fence_block(void) { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup"); }
void plat_fence_device(void) { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }
void plat_fence_system(void) { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, ""); }

static uint64_t clock_hz(void) {
  uint64_t hz = rtl_device_environment()->ClockFrequency;
  return hz ? hz : AMDGCN_DEFAULT_CLOCK_HZ;
}

uint64_t plat_nanoseconds(void) {
  uint64_t ticks = __builtin_readsteadycounter();
  uint64_t hz = clock_hz();
  /* Split to keep ticks * 1e9 from overflowing. */
  return ticks / hz * 1000000000ull + ticks % hz * 1000000000ull / hz;
}

double plat_tick_seconds(void) { return 1.0 / (double)clock_hz(); }

void *plat_dyn_shared(void) { return (void *)__omp_rtl_dyn_shared; }

uint32_t plat_dyn_shared_size(void) {
  const unsigned char *packet = (const unsigned char *)__builtin_amdgcn_dispatch_ptr();
  uint32_t total = *(const uint32_t *)(packet + HSA_DISPATCH_GROUP_SEGMENT_SIZE);
  uint32_t fixed = __builtin_amdgcn_groupstaticsize();
  return total > fixed ? total - fixed : 0;
}

__attribute__((noreturn)) void plat_trap(void) {
  __builtin_trap();
  __builtin_unreachable();
}

/* No host print service on AMD GPUs yet. */
int plat_vprintf(const char *format, void *packed_args) { return -1; }

void plat_yield(void) { __builtin_amdgcn_s_sleep(1); }

#endif
