/* The binary interface between clang-22's generated device code, the host
 * runtime and this device runtime. Layouts are fixed by LLVM 22
 * (offload/include/Shared/Environment.h) and checked below with static
 * asserts; clang-22 emits them in every OpenMP device module. */
#ifndef OMPDEVICE_ABI_H
#define OMPDEVICE_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Source location (`ident_t`): 24 bytes on 64-bit targets. */
typedef struct IdentTy {
  int32_t reserved_1;
  int32_t flags;
  int32_t reserved_2;
  int32_t reserved_3;
  const char *psource;
} IdentTy;

/* OMPTgtExecModeFlags: the third byte of a kernel's configuration. */
enum {
  OMP_TGT_EXEC_MODE_BARE = 0,
  OMP_TGT_EXEC_MODE_GENERIC = 1,
  OMP_TGT_EXEC_MODE_SPMD = 2,
  OMP_TGT_EXEC_MODE_GENERIC_SPMD = 3,
};

typedef struct ConfigurationEnvironmentTy {
  uint8_t UseGenericStateMachine;
  uint8_t MayUseNestedParallelism;
  uint8_t ExecMode;
  int32_t MinThreads;
  int32_t MaxThreads;
  int32_t MinTeams;
  int32_t MaxTeams;
  int32_t ReductionDataSize;
  int32_t ReductionBufferLength;
} ConfigurationEnvironmentTy;

typedef struct DynamicEnvironmentTy {
  uint16_t DebugIndentionLevel;
} DynamicEnvironmentTy;

/* `<kernel>_kernel_environment`: the first argument of __kmpc_target_init. */
typedef struct KernelEnvironmentTy {
  ConfigurationEnvironmentTy Configuration;
  IdentTy *Ident;
  DynamicEnvironmentTy *DynamicEnv;
} KernelEnvironmentTy;

/* What the host passes as the kernel's first argument (`dyn_ptr`) and
 * __kmpc_target_init's second: the teams-reduction buffer of this launch. */
typedef struct KernelLaunchEnvironmentTy {
  uint32_t ReductionCnt;
  uint32_t ReductionIterCnt;
  void *ReductionBuffer;
} KernelLaunchEnvironmentTy;

/* `__omp_rtl_device_environment`, written by the host plugin at load. */
typedef struct DeviceEnvironmentTy {
  uint32_t DeviceDebugKind;
  uint32_t NumDevices;
  uint32_t DeviceNum;
  uint32_t DynamicMemSize;
  uint64_t ClockFrequency;
  uintptr_t IndirectCallTable;
  uint64_t IndirectCallTableSize;
  uint64_t HardwareParallelism;
} DeviceEnvironmentTy;

_Static_assert(sizeof(IdentTy) == 24, "ident_t is 24 bytes");
_Static_assert(sizeof(ConfigurationEnvironmentTy) == 28, "ConfigurationEnvironmentTy is 28 bytes");
_Static_assert(sizeof(KernelEnvironmentTy) == 48, "KernelEnvironmentTy is 48 bytes");
_Static_assert(offsetof(KernelEnvironmentTy, Ident) == 32, "Ident at 32");
_Static_assert(offsetof(KernelEnvironmentTy, DynamicEnv) == 40, "DynamicEnv at 40");
_Static_assert(sizeof(KernelLaunchEnvironmentTy) == 16, "KernelLaunchEnvironmentTy is 16 bytes");
_Static_assert(sizeof(DeviceEnvironmentTy) == 48, "DeviceEnvironmentTy is 48 bytes");

/* Outlined parallel region: `void fn(int32_t *gtid, int32_t *btid, args...)`
 * called through the wrapper `void wrapper(int16_t, int32_t)` in generic
 * mode, or directly with the argument array in SPMD mode. */
typedef void (*ParallelRegionFnTy)(void);
typedef void (*ParallelWrapperFnTy)(int16_t, int32_t);

/* Reduction callbacks clang generates. */
typedef void (*ShuffleReductFnTy)(void *rhs, int16_t lane_id, int16_t lane_offset,
                                  int16_t algo_version);
typedef void (*InterWarpCopyFnTy)(void *src, int32_t warp_num);
typedef void (*ListGlobalFnTy)(void *buffer, int idx, void *reduce_data);

/* Task descriptor header (`kmp_task_t`): what __kmpc_omp_task_alloc returns
 * and the task entry receives. */
typedef int32_t (*TaskFnTy)(int32_t gtid, void *task);
typedef struct TaskDescriptorTy {
  void *Payload; /* the shareds pointer */
  TaskFnTy TaskFn;
} TaskDescriptorTy;

/* Kinds of the `kmp_sched_t` schedule argument (LLVM's libomp values). */
enum {
  KMP_SCHED_STATIC_CHUNKED = 33,
  KMP_SCHED_STATIC = 34,
  KMP_SCHED_DYNAMIC_CHUNKED = 35,
  KMP_SCHED_GUIDED_CHUNKED = 36,
  KMP_SCHED_RUNTIME = 37,
  KMP_SCHED_AUTO = 38,
  KMP_SCHED_STATIC_BALANCED_CHUNKED = 45,
  KMP_SCHED_DISTR_STATIC_CHUNKED = 91,
  KMP_SCHED_DISTR_STATIC = 92,
  KMP_SCHED_DISTR_STATIC_CHUNKED_CHUNKONE = 93,
  KMP_SCHED_ORDERED_OFFSET = 32, /* ordered variants: the above + 32 */
  KMP_SCHED_MODIFIER_MONOTONIC = 1 << 29,
  KMP_SCHED_MODIFIER_NONMONOTONIC = 1 << 30,
};

#endif
