/* What the device runtime needs of the hardware, one small set of
 * primitives implemented per target:
 *
 *   platform_nvptx.c    NVIDIA (nvptx64-nvidia-cuda)
 *   platform_amdgcn.c   AMD (amdgcn-amd-amdhsa)
 *   ../emu/emu.c        the host emulation CI runs (threads as GPU threads)
 *
 * Every other source file is target-independent and uses only these, the
 * clang __scoped_atomic / __atomic builtins, and the macros below. Kernels
 * are one-dimensional (OpenMP launches x only). */
#ifndef OMPDEVICE_PLATFORM_H
#define OMPDEVICE_PLATFORM_H

#include <stdint.h>

/* Team-shared ("shared memory" / LDS) storage for runtime state: no
 * initialiser; the runtime initialises it in __kmpc_target_init. */
#if defined(__NVPTX__) || defined(__AMDGPU__)
#define RTL_SHARED __attribute__((address_space(3), loader_uninitialized))
#define RTL_DEVICE_TARGET 1
#else
/* The emulation runs one team at a time, so team-shared is a global. */
#define RTL_SHARED
#define RTL_DEVICE_TARGET 0
#endif

/* Entry points clang calls. On GPUs they are hidden like everything else
 * (-fvisibility=hidden): the program's device code still links to them, and
 * the device link drops the ones it does not call. `protected` or `used`
 * would make the linker keep every entry point in every image (measured:
 * 534 KB instead of 157 KB of cubin for a two-kernel program). The host
 * emulation links the runtime like a library, so there they are default. */
#if RTL_DEVICE_TARGET
#define RTL_EXPORT __attribute__((visibility("hidden")))
#else
#define RTL_EXPORT __attribute__((visibility("default")))
#endif
/* Entry points on a kernel's hot path (loop schedules, parallel regions,
 * kernel init/exit, thread ids): inlined into the program's code by the
 * device link (-foffload-lto), so that the region's function pointer and
 * argument count become constants, the region is called directly and
 * inlined too, and the loop bounds stay in registers instead of going
 * through the stack. Measured on omp_bench's STREAM triad kernel (sm_90
 * PTX): see README.md, "Inlining". The emulation keeps real calls. */
#if RTL_DEVICE_TARGET
#define RTL_INLINE_ENTRY __attribute__((always_inline, flatten))
#define RTL_ALWAYS_INLINE __attribute__((always_inline))
#else
#define RTL_INLINE_ENTRY
#define RTL_ALWAYS_INLINE
#endif
/* Rare paths of hot entry points (e.g. a barrier of a partial team): out
 * of line, so that each kernel inlining the hot path carries less code. It
 * does not lower a kernel's registers below the callee's own: on NVIDIA a
 * kernel gets the most that any function it calls uses, so a cold path
 * that needs many registers must be made lighter, not moved (state.c). */
#define RTL_COLD __attribute__((noinline, cold))
/* Code every thread of a warp/block must reach together. */
#define RTL_CONVERGENT __attribute__((convergent))

/* Lanes of a warp run in lockstep (AMD wavefronts; NVIDIA sm_70+ and the
 * emulation schedule threads independently): a lane there must never spin
 * waiting for another lane of its own warp. */
#if defined(__AMDGPU__)
#define RTL_LOCKSTEP_WARPS 1
#else
#define RTL_LOCKSTEP_WARPS 0
#endif

/* The most threads a team can have on any supported target. */
#define RTL_MAX_THREADS 1024

/* --- ids --------------------------------------------------------------- */
uint32_t plat_thread_id(void);   /* in the block */
uint32_t plat_block_size(void);  /* threads in the block */
uint32_t plat_block_id(void);
uint32_t plat_num_blocks(void);
uint32_t plat_warp_size(void);   /* 32 nvptx, 64 amdgcn gfx9 (wave64) */
uint32_t plat_lane_id(void);     /* plat_thread_id() % plat_warp_size() */

/* --- warps --------------------------------------------------------------- */
/* Lanes of the caller's warp executing this call together. */
uint64_t plat_active_mask(void);
RTL_CONVERGENT void plat_sync_warp(uint64_t mask);
/* Value of `value` in lane (lane_id + delta) of a `width`-lane segment
 * (the caller's own value where that lane is outside the segment). */
RTL_CONVERGENT int32_t plat_shfl_down_i32(uint64_t mask, int32_t value, uint32_t delta,
                                          uint32_t width);
/* Value of `value` in lane `src_lane` of the caller's `width`-lane segment. */
RTL_CONVERGENT int32_t plat_shfl_idx_i32(uint64_t mask, int32_t value, uint32_t src_lane,
                                         uint32_t width);

/* --- block synchronisation ----------------------------------------------- */
/* All live threads of the block (threads that have returned from the kernel
 * no longer count), with block-scope acquire/release ordering. */
RTL_CONVERGENT void plat_sync_block(void);
/* The first `num_threads` threads of the block (a multiple of the warp
 * size), e.g. generic-mode workers without the main warp. */
RTL_CONVERGENT void plat_sync_block_partial(uint32_t num_threads);

/* --- fences --------------------------------------------------------------- */
void plat_fence_block(void);
void plat_fence_device(void);
void plat_fence_system(void);

/* --- time, memory, misc ---------------------------------------------------- */
uint64_t plat_nanoseconds(void);       /* a monotonic clock in ns */
double plat_tick_seconds(void);        /* its resolution */
void *plat_dyn_shared(void);           /* this launch's dynamic shared memory */
uint32_t plat_dyn_shared_size(void);   /* its size in bytes */
__attribute__((noreturn)) void plat_trap(void);
int plat_vprintf(const char *format, void *packed_args); /* nvptx vprintf ABI */
/* Let other threads run (a spin-wait's back-off). */
void plat_yield(void);

#endif
