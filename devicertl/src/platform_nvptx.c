/* platform.h for NVIDIA GPUs (nvptx64-nvidia-cuda), sm_70 and later.
 *
 * Barriers use the non-aligned `barrier.sync` forms: in generic mode the
 * main thread and the workers meet at different call sites, which the
 * aligned `bar.sync` (__syncthreads) does not allow. Barrier 0 is the whole
 * block, barrier 1 the partial one (the first N threads). */
#if defined(__NVPTX__)

#include "platform.h"

/* The partial barrier's id: 1, the lowest after the block barrier's 0.
 * ptxas reserves every id up to the highest one a kernel names, and an SM
 * holds a fixed number of barriers: with id 8 a kernel reserved 9 and
 * occupancy was capped at 7 blocks of the reduction kernel (ncu, H200). */
enum { NVPTX_WARP_SIZE = 32, NVPTX_PARTIAL_BARRIER = 1 };

/* Provided by the CUDA driver (the device-side printf). */
int vprintf(const char *format, void *packed_args);

/* Dynamic shared memory: an external zero-sized shared array is placed by
 * ptxas at the start of the launch's dynamic shared memory. */
extern __attribute__((address_space(3), aligned(16))) unsigned char __omp_rtl_dyn_shared[];

uint32_t plat_thread_id(void) { return __nvvm_read_ptx_sreg_tid_x(); }
uint32_t plat_block_size(void) { return __nvvm_read_ptx_sreg_ntid_x(); }
uint32_t plat_block_id(void) { return __nvvm_read_ptx_sreg_ctaid_x(); }
uint32_t plat_num_blocks(void) { return __nvvm_read_ptx_sreg_nctaid_x(); }
uint32_t plat_warp_size(void) { return NVPTX_WARP_SIZE; }
uint32_t plat_lane_id(void) { return __nvvm_read_ptx_sreg_laneid(); }

uint64_t plat_active_mask(void) { return __nvvm_activemask(); }

RTL_CONVERGENT void plat_sync_warp(uint64_t mask) { __nvvm_bar_warp_sync((uint32_t)mask); }

/* The `c` operand of shfl.sync: segment mask in bits 8..12, clamp 31. */
static uint32_t shfl_clamp(uint32_t width) { return ((NVPTX_WARP_SIZE - width) << 8) | 0x1f; }

RTL_CONVERGENT int32_t plat_shfl_down_i32(uint64_t mask, int32_t value, uint32_t delta,
                                          uint32_t width) {
  return __nvvm_shfl_sync_down_i32((uint32_t)mask, value, delta, shfl_clamp(width));
}

RTL_CONVERGENT int32_t plat_shfl_idx_i32(uint64_t mask, int32_t value, uint32_t src_lane,
                                         uint32_t width) {
  return __nvvm_shfl_sync_idx_i32((uint32_t)mask, value, src_lane, shfl_clamp(width));
}

/* barrier.sync orders the memory accesses of the participating threads
 * (block scope), so no extra fences are needed. */
RTL_CONVERGENT void plat_sync_block(void) { __nvvm_barrier_sync(0); }

RTL_CONVERGENT void plat_sync_block_partial(uint32_t num_threads) {
  __nvvm_barrier_sync_cnt(NVPTX_PARTIAL_BARRIER, num_threads);
}

void plat_fence_block(void) { __nvvm_membar_cta(); }
void plat_fence_device(void) { __nvvm_membar_gl(); }
void plat_fence_system(void) { __nvvm_membar_sys(); }

/* %globaltimer counts nanoseconds (updated every microsecond or faster). */
uint64_t plat_nanoseconds(void) { return __nvvm_read_ptx_sreg_globaltimer(); }
double plat_tick_seconds(void) { return 1.0e-9; }

void *plat_dyn_shared(void) { return (void *)__omp_rtl_dyn_shared; }

uint32_t plat_dyn_shared_size(void) {
  uint32_t bytes;
  __asm__ volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

__attribute__((noreturn)) void plat_trap(void) {
  __builtin_trap();
  __builtin_unreachable();
}

int plat_vprintf(const char *format, void *packed_args) { return vprintf(format, packed_args); }

/* Independent thread scheduling (sm_70+) lets a spinning thread's peers run
 * without a hint; nanosleep would need sm_70 in every build. */
void plat_yield(void) {}

#endif
