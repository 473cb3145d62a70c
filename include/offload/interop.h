/*
 * interop.h - reach the liboffload (ol*) API of an OpenMP device from an
 * OpenMP interop object.
 *
 * Our libomptarget.so.22.1 contains the ol* API (the same code as our
 * libLLVMOffload.so.22.1). An interop object created on any OpenMP device
 *
 *   omp_interop_t obj = omp_interop_none;
 *   #pragma omp interop init(targetsync: obj) device(dev)
 *
 * hands out a table of that API, bound to the object:
 *
 *   int rc;
 *   const offload_interop_table_t *t = (const offload_interop_table_t *)
 *       omp_get_interop_ptr(obj, (omp_interop_property_t)OMPX_IPR_OFFLOAD_TABLE, &rc);
 *   void *p;
 *   t->olMemAlloc(t->device, OL_ALLOC_TYPE_DEVICE, n, &p);     // memory of `dev`
 *   t->olMemcpy(t->queue, p, t->device, host, host_dev, n);    // on the targetsync queue
 *   #pragma omp interop use(obj)                               // waits for t->queue
 *
 * `device` is liboffload's handle of OpenMP device `dev` (liboffload device
 * N is OpenMP device N; the liboffload host device, last, has no OpenMP
 * number), `platform` its platform, and `queue` the object's targetsync
 * queue (NULL for an object made with init(target: ...) only). Device
 * memory of one is device memory of the other: a pointer from
 * omp_target_alloc(n, dev) may be given to t->olMemcpy with t->device, and
 * memory from t->olMemAlloc may be used in `target is_device_ptr(p) device(dev)`.
 * The functions are the library's own: use them, not the exported ol*
 * symbols of some other libLLVMOffload loaded into the process, with these
 * handles. The table stays valid until `#pragma omp interop destroy(obj)`.
 * liboffload is initialised (olInit) by libomptarget when the first interop
 * object is made and stays initialised until the process exits; a program
 * that calls t->olInit must balance it with t->olShutDown.
 *
 * Include path: this directory and LLVM 22's OffloadAPI.h, e.g.
 *   clang-22 -I<repo>/include -I/usr/lib/llvm-22/include/offload ...
 *
 * Versioning. `version` is OFFLOAD_INTEROP_TABLE_VERSION of the runtime
 * that filled the table and `size` its sizeof. Members are only ever
 * appended, never removed, reordered or retyped; every later version bumps
 * `version` and grows `size`. A caller compiled against an older header
 * reads the prefix it knows (a newer runtime's table starts with it); a
 * caller compiled against a newer header must check that a member it uses
 * lies inside `size` (OFFLOAD_INTEROP_TABLE_HAS) before touching it.
 */
#ifndef OFFLOAD_INTEROP_H
#define OFFLOAD_INTEROP_H

#include <stdbool.h> /* OffloadAPI.h uses bool without including it */
#include <stddef.h>
#include <stdint.h>

#include <OffloadAPI.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of offload_interop_table_t described by this header. */
#define OFFLOAD_INTEROP_TABLE_VERSION 1

/*
 * Implementation-defined interop property: a pointer
 * (omp_get_interop_ptr) to the object's `const offload_interop_table_t`.
 * OpenMP numbers implementation-defined properties from 0 up to
 * omp_get_num_interop_properties(obj) - 1 (the standard ones are negative,
 * down to omp_ipr_first); ours is the first, and
 * omp_get_num_interop_properties returns 1.
 */
#define OMPX_IPR_OFFLOAD_TABLE 0

/*
 * omp_ipr_fr_id of our interop objects: the foreign runtime is the ol* API
 * (omp_ipr_fr_name "liboffload"). An implementation-defined value above the
 * range of the OpenMP Additional Definitions' omp_ifr_* ids.
 */
#define OMPX_IFR_LIBOFFLOAD 0x100

/* Whether table `t` (a pointer) has member `m` (filled by the runtime). */
#define OFFLOAD_INTEROP_TABLE_HAS(t, m)                                        \
  ((t)->size >= offsetof(offload_interop_table_t, m) + sizeof((t)->m))

typedef struct offload_interop_table {
  uint32_t version; /* OFFLOAD_INTEROP_TABLE_VERSION of the runtime */
  uint32_t size;    /* sizeof(offload_interop_table_t) of the runtime */
  ol_platform_handle_t platform; /* platform of `device` */
  ol_device_handle_t device;     /* the interop object's OpenMP device */
  ol_queue_handle_t queue;       /* targetsync queue, or NULL */

  /* ---- version 1: every entry point of OffloadAPI.h (LLVM 22.1) ---- */
  ol_result_t(OL_APICALL *olInit)(void);
  ol_result_t(OL_APICALL *olShutDown)(void);
  ol_result_t(OL_APICALL *olIterateDevices)(ol_device_iterate_cb_t Callback,
                                            void *UserData);
  ol_result_t(OL_APICALL *olGetPlatformInfo)(ol_platform_handle_t Platform,
                                             ol_platform_info_t PropName,
                                             size_t PropSize, void *PropValue);
  ol_result_t(OL_APICALL *olGetPlatformInfoSize)(ol_platform_handle_t Platform,
                                                 ol_platform_info_t PropName,
                                                 size_t *PropSizeRet);
  ol_result_t(OL_APICALL *olGetDeviceInfo)(ol_device_handle_t Device,
                                           ol_device_info_t PropName,
                                           size_t PropSize, void *PropValue);
  ol_result_t(OL_APICALL *olGetDeviceInfoSize)(ol_device_handle_t Device,
                                               ol_device_info_t PropName,
                                               size_t *PropSizeRet);
  ol_result_t(OL_APICALL *olCreateQueue)(ol_device_handle_t Device,
                                         ol_queue_handle_t *Queue);
  ol_result_t(OL_APICALL *olDestroyQueue)(ol_queue_handle_t Queue);
  ol_result_t(OL_APICALL *olSyncQueue)(ol_queue_handle_t Queue);
  ol_result_t(OL_APICALL *olGetQueueInfo)(ol_queue_handle_t Queue,
                                          ol_queue_info_t PropName,
                                          size_t PropSize, void *PropValue);
  ol_result_t(OL_APICALL *olGetQueueInfoSize)(ol_queue_handle_t Queue,
                                              ol_queue_info_t PropName,
                                              size_t *PropSizeRet);
  ol_result_t(OL_APICALL *olWaitEvents)(ol_queue_handle_t Queue,
                                        ol_event_handle_t *Events,
                                        size_t NumEvents);
  ol_result_t(OL_APICALL *olLaunchHostFunction)(ol_queue_handle_t Queue,
                                                ol_host_function_cb_t Callback,
                                                void *UserData);
  ol_result_t(OL_APICALL *olCreateEvent)(ol_queue_handle_t Queue,
                                         ol_event_handle_t *Event);
  ol_result_t(OL_APICALL *olDestroyEvent)(ol_event_handle_t Event);
  ol_result_t(OL_APICALL *olSyncEvent)(ol_event_handle_t Event);
  ol_result_t(OL_APICALL *olGetEventInfo)(ol_event_handle_t Event,
                                          ol_event_info_t PropName,
                                          size_t PropSize, void *PropValue);
  ol_result_t(OL_APICALL *olGetEventInfoSize)(ol_event_handle_t Event,
                                              ol_event_info_t PropName,
                                              size_t *PropSizeRet);
  ol_result_t(OL_APICALL *olMemAlloc)(ol_device_handle_t Device,
                                      ol_alloc_type_t Type, size_t Size,
                                      void **AllocationOut);
  ol_result_t(OL_APICALL *olMemFree)(void *Address);
  ol_result_t(OL_APICALL *olGetMemInfo)(const void *Ptr, ol_mem_info_t PropName,
                                        size_t PropSize, void *PropValue);
  ol_result_t(OL_APICALL *olGetMemInfoSize)(const void *Ptr,
                                            ol_mem_info_t PropName,
                                            size_t *PropSizeRet);
  ol_result_t(OL_APICALL *olMemcpy)(ol_queue_handle_t Queue, void *DstPtr,
                                    ol_device_handle_t DstDevice,
                                    const void *SrcPtr,
                                    ol_device_handle_t SrcDevice, size_t Size);
  ol_result_t(OL_APICALL *olMemFill)(ol_queue_handle_t Queue, void *Ptr,
                                     size_t PatternSize, const void *PatternPtr,
                                     size_t FillSize);
  ol_result_t(OL_APICALL *olMemRegister)(ol_device_handle_t Device, void *Ptr,
                                         size_t Size,
                                         ol_memory_register_flags_t Flags,
                                         void **PinnedPtr);
  ol_result_t(OL_APICALL *olMemUnregister)(ol_device_handle_t Device,
                                           void *Ptr);
  ol_result_t(OL_APICALL *olCreateProgram)(ol_device_handle_t Device,
                                           const void *ProgData,
                                           size_t ProgDataSize,
                                           ol_program_handle_t *Program);
  ol_result_t(OL_APICALL *olDestroyProgram)(ol_program_handle_t Program);
  ol_result_t(OL_APICALL *olIsValidBinary)(ol_device_handle_t Device,
                                           const void *ProgData,
                                           size_t ProgDataSize, bool *Valid);
  ol_result_t(OL_APICALL *olGetSymbol)(ol_program_handle_t Program,
                                       const char *Name, ol_symbol_kind_t Kind,
                                       ol_symbol_handle_t *Symbol);
  ol_result_t(OL_APICALL *olGetSymbolInfo)(ol_symbol_handle_t Symbol,
                                           ol_symbol_info_t PropName,
                                           size_t PropSize, void *PropValue);
  ol_result_t(OL_APICALL *olGetSymbolInfoSize)(ol_symbol_handle_t Symbol,
                                               ol_symbol_info_t PropName,
                                               size_t *PropSizeRet);
  ol_result_t(OL_APICALL *olLaunchKernel)(
      ol_queue_handle_t Queue, ol_device_handle_t Device,
      ol_symbol_handle_t Kernel, const void *ArgumentsData,
      size_t ArgumentsSize, const ol_kernel_launch_size_args_t *LaunchSizeArgs);
  ol_result_t(OL_APICALL *olCalculateOptimalOccupancy)(
      ol_device_handle_t Device, ol_symbol_handle_t Kernel,
      size_t SharedMemory, size_t *GroupSize);
  /* ---- later versions append here ---- */
} offload_interop_table_t;

#ifdef __cplusplus
}
#endif

#endif /* OFFLOAD_INTEROP_H */
