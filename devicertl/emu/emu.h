/* Host emulation of a GPU for the device runtime (devicertl/src): every
 * function of platform.h for x86_64, on pthreads, and a launch API.
 *
 * A launch runs its blocks one after another (team-shared state is a plain
 * global off-GPU, see RTL_SHARED in platform.h). Within a block every GPU
 * thread is a pthread, all running concurrently, with thread-local
 * "hardware" ids. What is modelled (and what is not) is described at the top
 * of emu.c and in devicertl/README.md, "Testing on the host". */
#ifndef OMPDEVICE_EMU_H
#define OMPDEVICE_EMU_H

#include <stdint.h>

typedef struct emu_launch_config {
  uint32_t num_blocks;       /* >= 1 */
  uint32_t block_size;       /* 1 .. 1024 */
  uint32_t warp_size;        /* 32 (nvptx shape) or 64 (amdgcn wave64 shape) */
  uint32_t dyn_shared_bytes; /* 0: plat_dyn_shared() is NULL */
} emu_launch_config;

/* A kernel as the emulator calls it: every thread of every block runs
 * `kernel(dyn_ptr, args)`; a test adapts it to the clang-shaped kernel
 * `void k(KernelLaunchEnvironmentTy *dyn_ptr, <captures>...)`. */
typedef void (*emu_kernel_fn)(void *dyn_ptr, void **args);

/* Runs the launch to completion. Returns 0, or -1 for a bad configuration
 * or when threads cannot be created (with a message on stderr). One launch
 * at a time per process (a second concurrent call fails). */
int emu_launch(const emu_launch_config *cfg, emu_kernel_fn kernel, void *dyn_ptr, void **args);

/* plat_active_mask: by default every live lane of the caller's warp (not
 * the converged lanes: the emulator cannot know them); with the environment
 * variable EMU_ACTIVE_MASK=self, the caller's lane only.
 *
 * Diagnostics --------------------------------------------------------------
 * A deadlock (every live thread of a block waiting in the emulator with no
 * wait satisfiable), a wait longer than EMU_HANG_SECONDS (environment,
 * default 30), or a misuse of a primitive (a warp operation whose mask
 * leaves out the caller, a bad shuffle width, plat_sync_block_partial with a
 * count that is not a multiple of the warp size or from a thread outside it)
 * prints what every thread of the block is doing and abort()s. */

/* Value a shuffle returns when its source lane does not take part (exited,
 * beyond the block, or outside the mask): undefined on hardware, a loud
 * constant here so that a reduction that uses it gives a visibly wrong
 * result. */
#define EMU_SHFL_POISON ((int32_t)0x7A5A5A5A)

/* Counts since the process started (for the emulator's own tests). */
uint64_t emu_stat_block_barriers(void); /* completed plat_sync_block rounds */
uint64_t emu_stat_warp_ops(void);       /* completed warp collectives */

#endif
