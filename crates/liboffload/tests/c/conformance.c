/* conformance.c - the cases of LLVM's liboffload conformance suite
 * (llvm-project offload/unittests/OffloadAPI, LLVM 22 API 0.0.1), re-expressed
 * in our C style and run on every CPU device and, where LLVM runs them on
 * it or it makes sense, on the HOST device.
 *
 * Sections are named after LLVM's test files; each check notes the LLVM case
 * it mirrors. Cases that need GPU-only features are left out (see the
 * README's "Checked against LLVM's unittests" section).
 * Usage: conformance <kernels.so> */
#include "common.h"
#include <pthread.h>

static ol_device_handle_t H;
static ol_device_handle_t CPUS[MAX_DEVS];
static int NCPUS;
static const char *g_image_path;

/* ------------------------------------------------------------ init/ */

static bool stop_cb(ol_device_handle_t d, void *ud) {
  (void)d;
  ++*(int *)ud;
  return false;
}
static bool count_cb(ol_device_handle_t d, void *ud) {
  (void)d;
  ++*(int *)ud;
  return true;
}
static bool first_cb(ol_device_handle_t d, void *ud) {
  *(ol_device_handle_t *)ud = d;
  return false;
}

static void test_init(void) {
  int n = 0;
  /* olInit.Uninitialized */
  EXPECT(OL_ERRC_UNINITIALIZED, olIterateDevices(stop_cb, &n));
  CHECK(n == 0);
  EXPECT(OL_ERRC_UNINITIALIZED, olShutDown());
  /* Nesting: two inits need two shut-downs. */
  OK(olInit());
  OK(olInit());
  OK(olShutDown());
  OK(olIterateDevices(count_cb, &n));
  CHECK(n >= 2);
  OK(olShutDown());
  EXPECT(OL_ERRC_UNINITIALIZED, olIterateDevices(count_cb, &n));
  EXPECT(OL_ERRC_UNINITIALIZED, olShutDown());
  /* Re-initialisation works. */
  OK(olInit());
  /* olIterateDevices.SuccessEmptyCallback / SuccessGetDevice: early stop. */
  n = 0;
  OK(olIterateDevices(stop_cb, &n));
  CHECK(n == 1);
  ol_device_handle_t first = NULL;
  OK(olIterateDevices(first_cb, &first));
  CHECK(first != NULL);
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olIterateDevices(NULL, NULL));
}

/* ------------------------------------------------------------ platform/ */

static void check_platform_string(ol_platform_handle_t p, ol_platform_info_t prop) {
  size_t size = 0;
  OK(olGetPlatformInfoSize(p, prop, &size));
  CHECK(size > 0 && size < 0x1000);
  char buf[0x1000];
  memset(buf, 'x', sizeof buf);
  OK(olGetPlatformInfo(p, prop, size, buf));
  CHECK(strlen(buf) == size - 1);
}

static void test_platform(ol_device_handle_t d) {
  ol_platform_handle_t p = NULL;
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_PLATFORM, sizeof p, &p));
  CHECK(p != NULL);
  /* olGetPlatformInfo.Success{Name,VendorName,Version,Backend} */
  check_platform_string(p, OL_PLATFORM_INFO_NAME);
  check_platform_string(p, OL_PLATFORM_INFO_VENDOR_NAME);
  check_platform_string(p, OL_PLATFORM_INFO_VERSION);
  ol_platform_backend_t b = OL_PLATFORM_BACKEND_UNKNOWN;
  OK(olGetPlatformInfo(p, OL_PLATFORM_INFO_BACKEND, sizeof b, &b));
  CHECK(b == OL_PLATFORM_BACKEND_HOST);
  size_t s = 0;
  OK(olGetPlatformInfoSize(p, OL_PLATFORM_INFO_BACKEND, &s));
  CHECK(s == sizeof(ol_platform_backend_t));
  /* Invalid* cases of olGetPlatformInfo / olGetPlatformInfoSize */
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetPlatformInfo(NULL, OL_PLATFORM_INFO_BACKEND, sizeof b, &b));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetPlatformInfo(p, OL_PLATFORM_INFO_FORCE_UINT32, sizeof b, &b));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetPlatformInfo(p, OL_PLATFORM_INFO_BACKEND, 0, &b));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetPlatformInfo(p, OL_PLATFORM_INFO_BACKEND, sizeof b - 1, &b));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetPlatformInfo(p, OL_PLATFORM_INFO_BACKEND, sizeof b, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetPlatformInfoSize(NULL, OL_PLATFORM_INFO_BACKEND, &s));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetPlatformInfoSize(p, OL_PLATFORM_INFO_FORCE_UINT32, &s));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetPlatformInfoSize(p, OL_PLATFORM_INFO_BACKEND, NULL));
}

/* ------------------------------------------------------------ device/ */

/* Expected size of each device info value (0: a string). */
static size_t device_info_size(ol_device_info_t p) {
  switch (p) {
  case OL_DEVICE_INFO_TYPE: return sizeof(ol_device_type_t);
  case OL_DEVICE_INFO_PLATFORM: return sizeof(ol_platform_handle_t);
  case OL_DEVICE_INFO_NAME: case OL_DEVICE_INFO_PRODUCT_NAME: case OL_DEVICE_INFO_UID:
  case OL_DEVICE_INFO_VENDOR: case OL_DEVICE_INFO_DRIVER_VERSION: return 0;
  case OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE_PER_DIMENSION:
  case OL_DEVICE_INFO_MAX_WORK_SIZE_PER_DIMENSION: return sizeof(ol_dimensions_t);
  case OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE: case OL_DEVICE_INFO_GLOBAL_MEM_SIZE:
  case OL_DEVICE_INFO_WORK_GROUP_LOCAL_MEM_SIZE: return sizeof(uint64_t);
  case OL_DEVICE_INFO_SINGLE_FP_CONFIG: case OL_DEVICE_INFO_DOUBLE_FP_CONFIG:
  case OL_DEVICE_INFO_HALF_FP_CONFIG: return sizeof(ol_device_fp_capability_flags_t);
  default: return sizeof(uint32_t);
  }
}

static uint32_t dev_u32(ol_device_handle_t d, ol_device_info_t p) {
  uint32_t v = 0;
  OK(olGetDeviceInfo(d, p, sizeof v, &v));
  return v;
}
static uint64_t dev_u64(ol_device_handle_t d, ol_device_info_t p) {
  uint64_t v = 0;
  OK(olGetDeviceInfo(d, p, sizeof v, &v));
  return v;
}

static void test_device_info(ol_device_handle_t d) {
  bool is_host = d == H;
  /* olGetDeviceInfo(Size): every enumerator, size query then value. */
  for (int p = 0; p < OL_DEVICE_INFO_LAST; p++) {
    size_t s = 0, want = device_info_size(p);
    OK(olGetDeviceInfoSize(d, p, &s));
    if (want) CHECK(s == want);
    else CHECK(s > 0 && s < 0x1000);
    char buf[0x1000];
    memset(buf, 'x', sizeof buf);
    OK(olGetDeviceInfo(d, p, s, buf));
    if (!want) CHECK(strlen(buf) == s - 1);
  }
  ol_device_type_t t;
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof t, &t));
  CHECK(is_host ? t == OL_DEVICE_TYPE_HOST : t == OL_DEVICE_TYPE_CPU); /* HostSuccessType */
  /* The value checks: > 0 on devices and on the host ... */
  static const ol_device_info_t positive[] = {
      OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE, OL_DEVICE_INFO_NUM_COMPUTE_UNITS,
      OL_DEVICE_INFO_SINGLE_FP_CONFIG, OL_DEVICE_INFO_DOUBLE_FP_CONFIG,
      OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_CHAR, OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_SHORT,
      OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_INT, OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_LONG,
      OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_FLOAT, OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_DOUBLE,
      OL_DEVICE_INFO_MAX_CLOCK_FREQUENCY, OL_DEVICE_INFO_MEMORY_CLOCK_RATE,
      OL_DEVICE_INFO_ADDRESS_BITS};
  for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) {
    uint32_t v = dev_u32(d, positive[i]);
    if (v == 0) fprintf(stderr, "device info %d is 0\n", positive[i]);
    CHECK(v > 0);
  }
  (void)dev_u32(d, OL_DEVICE_INFO_HALF_FP_CONFIG);
  (void)dev_u32(d, OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_HALF);
  /* ... and > 0 only on devices (the host just succeeds). */
  if (!is_host) {
    CHECK(dev_u32(d, OL_DEVICE_INFO_VENDOR_ID) > 0);
    CHECK(dev_u64(d, OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE) > 0);
    CHECK(dev_u64(d, OL_DEVICE_INFO_GLOBAL_MEM_SIZE) > 0);
  }
  ol_dimensions_t dims = {0, 0, 0};
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE_PER_DIMENSION, sizeof dims, &dims));
  CHECK(dims.x > 0 && dims.y > 0 && dims.z > 0);
  /* Invalid* cases */
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetDeviceInfo(NULL, OL_DEVICE_INFO_TYPE, sizeof t, &t));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetDeviceInfo(d, OL_DEVICE_INFO_FORCE_UINT32, sizeof t, &t));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, 0, &t));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof t - 1, &t));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof t, NULL));
  size_t s;
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetDeviceInfoSize(NULL, OL_DEVICE_INFO_TYPE, &s));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetDeviceInfoSize(d, OL_DEVICE_INFO_FORCE_UINT32, &s));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetDeviceInfoSize(d, OL_DEVICE_INFO_TYPE, NULL));
}

/* ------------------------------------------------------------ memory/ */

static const ol_alloc_type_t ALLOC_TYPES[3] = {OL_ALLOC_TYPE_DEVICE, OL_ALLOC_TYPE_MANAGED,
                                               OL_ALLOC_TYPE_HOST};

static void test_alloc_free_info(ol_device_handle_t d) {
  for (int i = 0; i < 3; i++) {
    /* olMemAlloc.SuccessAlloc* / olMemFree.SuccessFree* */
    void *p = NULL;
    OK(olMemAlloc(d, ALLOC_TYPES[i], 1024, &p));
    CHECK(p != NULL);
    /* olGetMemInfo.Success{Device,Base,Size,Type}[Offset] */
    void *ptrs[2] = {p, (char *)p + 123};
    for (int k = 0; k < 2; k++) {
      ol_device_handle_t md = NULL;
      void *base = NULL;
      size_t size = 0;
      ol_alloc_type_t ty = OL_ALLOC_TYPE_FORCE_UINT32;
      OK(olGetMemInfo(ptrs[k], OL_MEM_INFO_DEVICE, sizeof md, &md));
      OK(olGetMemInfo(ptrs[k], OL_MEM_INFO_BASE, sizeof base, &base));
      OK(olGetMemInfo(ptrs[k], OL_MEM_INFO_SIZE, sizeof size, &size));
      OK(olGetMemInfo(ptrs[k], OL_MEM_INFO_TYPE, sizeof ty, &ty));
      CHECK(md == d && base == p && size == 1024 && ty == ALLOC_TYPES[i]);
    }
    /* olGetMemInfoSize.Success (per property) */
    static const struct { ol_mem_info_t p; size_t s; } sizes[] = {
        {OL_MEM_INFO_DEVICE, sizeof(ol_device_handle_t)}, {OL_MEM_INFO_BASE, sizeof(void *)},
        {OL_MEM_INFO_SIZE, sizeof(size_t)}, {OL_MEM_INFO_TYPE, sizeof(ol_alloc_type_t)}};
    for (int k = 0; k < 4; k++) {
      size_t s = 0;
      OK(olGetMemInfoSize(p, sizes[k].p, &s));
      CHECK(s == sizes[k].s);
    }
    ol_device_handle_t md;
    size_t s;
    /* olGetMemInfo.Invalid* / olGetMemInfoSize.Invalid* */
    EXPECT(OL_ERRC_NOT_FOUND, olGetMemInfo((void *)0x1234, OL_MEM_INFO_BASE, sizeof md, &md));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetMemInfo(NULL, OL_MEM_INFO_DEVICE, sizeof md, &md));
    EXPECT(OL_ERRC_INVALID_SIZE, olGetMemInfo(p, OL_MEM_INFO_DEVICE, 0, &md));
    EXPECT(OL_ERRC_INVALID_SIZE, olGetMemInfo(p, OL_MEM_INFO_DEVICE, sizeof md - 1, &md));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetMemInfo(p, OL_MEM_INFO_DEVICE, sizeof md, NULL));
    EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetMemInfoSize(p, OL_MEM_INFO_FORCE_UINT32, &s));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetMemInfoSize(p, OL_MEM_INFO_DEVICE, NULL));
    /* olMemFree.InvalidNullPtr */
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemFree(NULL));
    OK(olMemFree(p));
  }
  void *p;
  /* olMemAlloc.InvalidNullDevice / InvalidNullOutPtr, and Size == 0 */
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemAlloc(NULL, OL_ALLOC_TYPE_DEVICE, 1024, &p));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemAlloc(d, OL_ALLOC_TYPE_DEVICE, 1024, NULL));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemAlloc(d, OL_ALLOC_TYPE_DEVICE, 0, &p));
}

static void test_register(ol_device_handle_t d) {
  int arr[50], arr1[50];
  void *pinned = NULL, *pinned1 = NULL;
  /* olMemRegister.SuccessRegister */
  OK(olMemRegister(d, arr, sizeof arr, 0, &pinned));
  CHECK(pinned != NULL);
  OK(olMemUnregister(d, pinned));
  /* SuccessMultipleRegister */
  OK(olMemRegister(d, arr, sizeof arr, 0, &pinned));
  OK(olMemRegister(d, arr, sizeof arr, 0, &pinned1));
  CHECK(pinned && pinned1);
  OK(olMemUnregister(d, pinned));
  OK(olMemUnregister(d, pinned1));
  /* InvalidSizeRegister / InvalidPtrRegister */
  EXPECT(OL_ERRC_INVALID_SIZE, olMemRegister(d, arr, 0, 0, &pinned));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemRegister(d, NULL, sizeof arr, 0, &pinned));
  /* InvalidPtrUnRegister / UnregisteredPtrUnRegister / PartialOverlapPtrRegister */
  OK(olMemRegister(d, arr, sizeof arr, 0, &pinned));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemUnregister(d, NULL));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemUnregister(d, arr1));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemRegister(d, arr + 2, sizeof arr, 0, &pinned1));
  OK(olMemUnregister(d, pinned));
}

static volatile int g_hf_count;
static void count_fn(void *ud) {
  (void)ud;
  g_hf_count++;
}

/* One olMemFill case: `n` bytes of managed memory (device memory read back
 * with olMemcpy when `device_mem`), pattern `pat` of `ps` bytes, optionally
 * behind an earlier host function on the queue (the "Enqueue" variants). */
static void fill_case(ol_device_handle_t d, ol_queue_handle_t q, const void *pat, size_t ps,
                      size_t n, bool device_mem, bool enqueue_first) {
  unsigned char *mem = NULL;
  OK(olMemAlloc(d, device_mem ? OL_ALLOC_TYPE_DEVICE : OL_ALLOC_TYPE_MANAGED, n, (void **)&mem));
  if (!mem) return;
  if (enqueue_first) OK(olLaunchHostFunction(q, count_fn, NULL));
  OK(olMemFill(q, mem, ps, pat, n));
  unsigned char *got = mem, *copy = NULL;
  if (device_mem) {
    copy = malloc(n);
    /* H -> H with a queue is refused (header), so no queue on the host
     * device; a NULL-queue copy is not ordered after the queue: sync first. */
    if (d == H) OK(olSyncQueue(q));
    OK(olMemcpy(d == H ? NULL : q, copy, H, mem, d, n));
    got = copy;
  }
  OK(olSyncQueue(q));
  int good = 1;
  for (size_t i = 0; i < n - n % ps; i++) good &= got[i] == ((const unsigned char *)pat)[i % ps];
  CHECK(good);
  free(copy);
  OK(olMemFree(mem));
}

static void test_fill(ol_device_handle_t d) {
  ol_queue_handle_t q;
  OK(olCreateQueue(d, &q));
  uint8_t p8 = 0x42;
  uint16_t p16 = 0x4243;
  uint32_t p32 = 0xDEADBEEF;
  struct { uint64_t a, b; } p128 = {UINT64_MAX, UINT64_MAX};
  struct __attribute__((packed)) { uint64_t a, b; uint8_t c; } p136 = {UINT64_MAX, UINT64_MAX, 255};
  static const unsigned char p24[3] = {0x11, 0x22, 0x33};
  for (int e = 0; e < 2; e++) {
    fill_case(d, q, &p8, 1, 1024, false, e);     /* Success8[Enqueue] */
    fill_case(d, q, &p8, 1, 1023, false, e);     /* Success8NotMultiple4[Enqueue] */
    fill_case(d, q, &p16, 2, 1022, false, e);    /* Success16NotMultiple4[Enqueue] */
    fill_case(d, q, &p32, 4, 1024, false, e);    /* Success32[Enqueue] */
    fill_case(d, q, &p128, 16, 1024, false, e);  /* SuccessLarge[Enqueue] */
    fill_case(d, q, &p136, 17, 17 * 64, false, e); /* SuccessLargeByteAligned[Enqueue] */
  }
  fill_case(d, q, p24, 3, 3 * 1000, false, false); /* SuccessNonPow2PatternManaged */
  fill_case(d, q, p24, 3, 3 * 1000, true, false);  /* SuccessNonPow2PatternDevice */
  fill_case(d, q, p24, 3, 3 * 2, true, false);     /* SuccessNonPow2PatternDeviceSmall */
  uint64_t p64 = 0x4242424242424242ull;
  void *mem;
  /* InvalidSizeNotMultipleOfPatternSize / InvalidPatternSizeLargerThanFillSize */
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, 1025, &mem));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(q, mem, sizeof p16, &p16, 1025));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(q, mem, sizeof p64, &p64, 4));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(q, mem, 0, &p64, 8)); /* no division by zero */
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemFill(q, NULL, 4, &p32, 8));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemFill(q, mem, 4, NULL, 8));
  OK(olSyncQueue(q));
  OK(olMemFree(mem));
  OK(olDestroyQueue(q));
}

static void test_memcpy(ol_device_handle_t d) {
  enum { SIZE = 1024 };
  ol_queue_handle_t q;
  OK(olCreateQueue(d, &q));
  uint8_t in[SIZE], out[SIZE];
  memset(in, 42, SIZE);
  void *a, *b;
  OK(olMemAlloc(d, OL_ALLOC_TYPE_DEVICE, SIZE, &a));
  OK(olMemAlloc(d, OL_ALLOC_TYPE_DEVICE, SIZE, &b));
  /* SuccessHtoD / SuccessDtoH / SuccessDtoD (queued; LLVM runs these on
   * non-host devices only: H -> H with a queue is refused, checked below) */
  ol_queue_handle_t cq = d == H ? NULL : q;
  memset(out, 0, SIZE);
  OK(olMemcpy(cq, a, d, in, H, SIZE));
  OK(olMemcpy(cq, b, d, a, d, SIZE));
  OK(olMemcpy(cq, out, H, b, d, SIZE));
  OK(olSyncQueue(q));
  CHECK(memcmp(in, out, SIZE) == 0);
  /* SuccessDtoHSync */
  memset(out, 0, SIZE);
  OK(olMemcpy(NULL, a, d, in, H, SIZE));
  OK(olMemcpy(NULL, out, H, a, d, SIZE));
  CHECK(memcmp(in, out, SIZE) == 0);
  /* SuccessHtoHSync / SuccessSizeZero */
  memset(out, 0, SIZE);
  OK(olMemcpy(NULL, out, H, in, H, SIZE));
  CHECK(memcmp(in, out, SIZE) == 0);
  OK(olMemcpy(NULL, out, H, in, H, 0));
  OK(olMemcpy(cq, out, H, a, d, 0));
  /* The header: with a queue, at least one device must be a non-host device. */
  if (d != H) {
    ol_queue_handle_t hq;
    OK(olCreateQueue(H, &hq));
    EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(q, out, H, in, H, SIZE));
    EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(hq, out, H, in, H, 0));
    /* A copy with the host device's queue still works when a device is involved. */
    memset(out, 0, SIZE);
    OK(olMemcpy(hq, out, H, a, d, SIZE));
    OK(olSyncQueue(hq));
    CHECK(memcmp(in, out, SIZE) == 0);
    OK(olDestroyQueue(hq));
  } else {
    EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemcpy(q, out, H, in, H, SIZE));
  }
  /* Null handles before null pointers (LLVM's validation order). */
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemcpy(NULL, NULL, NULL, in, H, SIZE));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemcpy(NULL, NULL, H, NULL, NULL, SIZE));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemcpy(NULL, NULL, H, in, H, SIZE));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemcpy(NULL, out, H, NULL, H, SIZE));
  OK(olMemFree(a));
  OK(olMemFree(b));
  OK(olDestroyQueue(q));
}

/* ------------------------------------------------------------ queue/ event/ */

static void fib_fn(void *ud) {
  uint32_t *p = ud;
  p[0] = p[-1] + p[-2];
}

static void test_queue_event(ol_device_handle_t d) {
  ol_queue_handle_t q = NULL;
  /* olCreateQueue.* */
  OK(olCreateQueue(d, &q));
  CHECK(q != NULL);
  ol_queue_handle_t q2;
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCreateQueue(NULL, &q2));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateQueue(d, NULL));
  /* olSyncQueue.SuccessEmptyQueue */
  OK(olSyncQueue(q));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olSyncQueue(NULL));
  /* olGetQueueInfo.* / olGetQueueInfoSize.* */
  ol_device_handle_t qd = NULL;
  bool empty = false;
  OK(olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, sizeof qd, &qd));
  CHECK(qd == d);
  OK(olGetQueueInfo(q, OL_QUEUE_INFO_EMPTY, sizeof empty, &empty));
  CHECK(empty);
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetQueueInfo(NULL, OL_QUEUE_INFO_DEVICE, sizeof qd, &qd));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetQueueInfo(q, OL_QUEUE_INFO_FORCE_UINT32, sizeof qd, &qd));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, 0, &qd));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, sizeof qd - 1, &qd));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, sizeof qd, NULL));
  size_t s = 0;
  OK(olGetQueueInfoSize(q, OL_QUEUE_INFO_DEVICE, &s));
  CHECK(s == sizeof(ol_device_handle_t));
  OK(olGetQueueInfoSize(q, OL_QUEUE_INFO_EMPTY, &s));
  CHECK(s == sizeof(bool));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetQueueInfoSize(NULL, OL_QUEUE_INFO_DEVICE, &s));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetQueueInfoSize(q, OL_QUEUE_INFO_FORCE_UINT32, &s));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetQueueInfoSize(q, OL_QUEUE_INFO_DEVICE, NULL));

  /* olLaunchHostFunction.Success / SuccessSequence / InvalidNull* */
  OK(olLaunchHostFunction(q, count_fn, NULL));
  uint32_t buff[16] = {1, 1};
  for (int i = 2; i < 16; i++) OK(olLaunchHostFunction(q, fib_fn, &buff[i]));
  OK(olSyncQueue(q));
  int good = 1;
  for (int i = 2; i < 16; i++) good &= buff[i] == buff[i - 1] + buff[i - 2];
  CHECK(good && buff[15] == 987);
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olLaunchHostFunction(q, NULL, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olLaunchHostFunction(NULL, count_fn, NULL));

  /* olCreateEvent.* : an event on an empty (synchronised) queue is complete. */
  ol_event_handle_t e = NULL;
  OK(olCreateEvent(q, &e));
  CHECK(e != NULL);
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCreateEvent(NULL, &e));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateEvent(q, NULL));
  OK(olSyncQueue(q)); /* OffloadEventTest fixture */
  bool done = false;
  OK(olGetEventInfo(e, OL_EVENT_INFO_IS_COMPLETE, sizeof done, &done));
  CHECK(done);
  /* olGetEventInfo.* / olGetEventInfoSize.* */
  ol_queue_handle_t eq = NULL;
  OK(olGetEventInfo(e, OL_EVENT_INFO_QUEUE, sizeof eq, &eq));
  CHECK(eq == q);
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetEventInfo(NULL, OL_EVENT_INFO_QUEUE, sizeof eq, &eq));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetEventInfo(e, OL_EVENT_INFO_FORCE_UINT32, sizeof eq, &eq));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetEventInfo(e, OL_EVENT_INFO_QUEUE, 0, &eq));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetEventInfo(e, OL_EVENT_INFO_QUEUE, sizeof eq - 1, &eq));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetEventInfo(e, OL_EVENT_INFO_QUEUE, sizeof eq, NULL));
  OK(olGetEventInfoSize(e, OL_EVENT_INFO_QUEUE, &s));
  CHECK(s == sizeof(ol_queue_handle_t));
  OK(olGetEventInfoSize(e, OL_EVENT_INFO_IS_COMPLETE, &s));
  CHECK(s == sizeof(bool));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetEventInfoSize(NULL, OL_EVENT_INFO_QUEUE, &s));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetEventInfoSize(e, OL_EVENT_INFO_FORCE_UINT32, &s));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetEventInfoSize(e, OL_EVENT_INFO_QUEUE, NULL));
  /* olSyncEvent.Success / SuccessMultipleSync / InvalidNullEvent */
  for (int i = 0; i < 10; i++) OK(olSyncEvent(e));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olSyncEvent(NULL));
  /* An event after work: complete once synchronised. */
  ol_event_handle_t e2;
  OK(olLaunchHostFunction(q, count_fn, NULL));
  OK(olCreateEvent(q, &e2));
  OK(olSyncEvent(e2));
  OK(olGetEventInfo(e2, OL_EVENT_INFO_IS_COMPLETE, sizeof done, &done));
  CHECK(done);
  /* olWaitEvents: zero events, own queue's events, Invalid* */
  OK(olWaitEvents(q, &e, 0));
  ol_event_handle_t both[2] = {e, e2};
  OK(olWaitEvents(q, both, 2));
  ol_event_handle_t null_ev = NULL;
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olWaitEvents(NULL, &e, 1));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olWaitEvents(q, NULL, 1));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olWaitEvents(q, &null_ev, 1));
  /* olDestroyEvent.* */
  OK(olDestroyEvent(e));
  OK(olDestroyEvent(e2));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olDestroyEvent(NULL));
  /* olDestroyQueue.*: events of a destroyed queue stay valid. */
  ol_event_handle_t e3;
  OK(olLaunchHostFunction(q, count_fn, NULL));
  OK(olCreateEvent(q, &e3));
  OK(olDestroyQueue(q));
  OK(olSyncEvent(e3));
  OK(olGetEventInfo(e3, OL_EVENT_INFO_QUEUE, sizeof eq, &eq));
  OK(olDestroyEvent(e3));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olDestroyQueue(NULL));
}

/* ------------------------------------------------------------ program/ symbol/ kernel/ */

static ol_symbol_handle_t kernel(ol_program_handle_t p, const char *name) {
  ol_symbol_handle_t k = NULL;
  OK(olGetSymbol(p, name, OL_SYMBOL_KIND_KERNEL, &k));
  return k;
}

struct threaded_ctx {
  ol_device_handle_t d;
  ol_queue_handle_t q;
  ol_symbol_handle_t k;
};
static void *threaded_launch(void *arg) {
  struct threaded_ctx *c = arg;
  ol_kernel_launch_size_args_t ls = {1, {1, 1, 1}, {64, 1, 1}, 0};
  for (int round = 0; round < 5; round++) {
    uint32_t *mem = NULL;
    OK(olMemAlloc(c->d, OL_ALLOC_TYPE_MANAGED, 64 * sizeof(uint32_t), (void **)&mem));
    if (!mem) return NULL;
    OK(olLaunchKernel(c->q, c->d, c->k, &mem, sizeof mem, &ls));
    OK(olSyncQueue(c->q));
    int good = 1;
    for (uint32_t i = 0; i < 64; i++) good &= mem[i] == i;
    CHECK(good);
    OK(olMemFree(mem));
  }
  return NULL;
}

static void test_programs(ol_device_handle_t d, const char *img, size_t size) {
  /* olIsValidBinary.Success */
  bool valid = false;
  OK(olIsValidBinary(d, img, size, &valid));
  CHECK(valid);
  OK(olIsValidBinary(d, img, 0, &valid));
  CHECK(!valid);
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olIsValidBinary(d, NULL, size, &valid));
  CHECK(!valid);
  /* olCreateProgram.* */
  ol_program_handle_t prog = NULL;
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCreateProgram(NULL, img, size, &prog));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateProgram(d, NULL, size, &prog));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateProgram(d, img, size, NULL));
  EXPECT(OL_ERRC_INVALID_BINARY, olCreateProgram(d, img, 0, &prog)); /* ZeroSizeBinary */
  CHECK(prog == NULL);
  static const char invalid[] = "not an offload binary";
  EXPECT(OL_ERRC_INVALID_BINARY, olCreateProgram(d, invalid, sizeof invalid - 1, &prog));
  CHECK(prog == NULL);
  OK(olCreateProgram(d, img, size, &prog));
  CHECK(prog != NULL);
  if (!prog) return;

  /* olGetSymbol.* (kernels and globals) */
  ol_symbol_handle_t k = NULL, k2 = NULL, g = NULL, g2 = NULL;
  OK(olGetSymbol(prog, "write_ids", OL_SYMBOL_KIND_KERNEL, &k));
  OK(olGetSymbol(prog, "write_ids", OL_SYMBOL_KIND_KERNEL, &k2));
  CHECK(k != NULL && k == k2);
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetSymbol(NULL, "write_ids", OL_SYMBOL_KIND_KERNEL, &k2));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetSymbol(prog, "write_ids", OL_SYMBOL_KIND_KERNEL, NULL));
  EXPECT(OL_ERRC_NOT_FOUND, olGetSymbol(prog, "invalid_kernel_name", OL_SYMBOL_KIND_KERNEL, &k2));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetSymbol(prog, "write_ids", OL_SYMBOL_KIND_FORCE_UINT32, &k2));
  OK(olGetSymbol(prog, "g_table", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &g));
  OK(olGetSymbol(prog, "g_table", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &g2));
  CHECK(g != NULL && g == g2);
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetSymbol(NULL, "g_table", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &g2));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetSymbol(prog, "g_table", OL_SYMBOL_KIND_GLOBAL_VARIABLE, NULL));
  EXPECT(OL_ERRC_NOT_FOUND, olGetSymbol(prog, "invalid_global", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &g2));

  /* olGetSymbolInfo.* / olGetSymbolInfoSize.* */
  ol_symbol_kind_t kind = OL_SYMBOL_KIND_FORCE_UINT32;
  void *addr = NULL;
  size_t gsize = 0, s = 0;
  OK(olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, sizeof kind, &kind));
  CHECK(kind == OL_SYMBOL_KIND_KERNEL);
  OK(olGetSymbolInfo(g, OL_SYMBOL_INFO_KIND, sizeof kind, &kind));
  CHECK(kind == OL_SYMBOL_KIND_GLOBAL_VARIABLE);
  EXPECT(OL_ERRC_SYMBOL_KIND, olGetSymbolInfo(k, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, sizeof addr, &addr));
  OK(olGetSymbolInfo(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, sizeof addr, &addr));
  CHECK(addr != NULL);
  EXPECT(OL_ERRC_SYMBOL_KIND, olGetSymbolInfo(k, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, sizeof gsize, &gsize));
  OK(olGetSymbolInfo(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, sizeof gsize, &gsize));
  CHECK(gsize == 64);
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetSymbolInfo(NULL, OL_SYMBOL_INFO_KIND, sizeof kind, &kind));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetSymbolInfo(k, OL_SYMBOL_INFO_FORCE_UINT32, sizeof kind, &kind));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, 0, &kind));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, sizeof kind - 1, &kind));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, sizeof kind, NULL));
  OK(olGetSymbolInfoSize(g, OL_SYMBOL_INFO_KIND, &s)); CHECK(s == sizeof(ol_symbol_kind_t));
  OK(olGetSymbolInfoSize(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, &s)); CHECK(s == sizeof(void *));
  OK(olGetSymbolInfoSize(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, &s)); CHECK(s == sizeof(size_t));
  OK(olGetSymbolInfoSize(k, OL_SYMBOL_INFO_KIND, &s)); CHECK(s == sizeof(ol_symbol_kind_t));
  EXPECT(OL_ERRC_SYMBOL_KIND, olGetSymbolInfoSize(k, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, &s));
  EXPECT(OL_ERRC_SYMBOL_KIND, olGetSymbolInfoSize(k, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, &s));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetSymbolInfoSize(NULL, OL_SYMBOL_INFO_KIND, &s));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetSymbolInfoSize(k, OL_SYMBOL_INFO_FORCE_UINT32, &s));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetSymbolInfoSize(k, OL_SYMBOL_INFO_KIND, NULL));

  /* olMemcpyGlobalTest.SuccessRoundTrip (on g_table) */
  uint32_t *src = NULL, *dst = NULL;
  ol_queue_handle_t q;
  OK(olCreateQueue(d, &q));
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, 64 * sizeof(uint32_t), (void **)&src));
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, 64 * sizeof(uint32_t), (void **)&dst));
  for (uint32_t i = 0; i < 16; i++) src[i] = i;
  OK(olMemcpy(q, addr, d, src, H, 64));
  OK(olSyncQueue(q));
  OK(olMemcpy(q, dst, H, addr, d, 64));
  OK(olSyncQueue(q));
  CHECK(memcmp(src, dst, 64) == 0);

  /* olLaunchKernel (the LLVM 22 suite: packed argument buffer) */
  ol_kernel_launch_size_args_t ls = {1, {1, 1, 1}, {64, 1, 1}, 0};
  uint32_t *mem = NULL;
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, 4 * 64 * sizeof(uint32_t), (void **)&mem));
  /* Foo.Success */
  memset(mem, 0, 64 * sizeof(uint32_t));
  OK(olLaunchKernel(q, d, k, &mem, sizeof mem, &ls));
  OK(olSyncQueue(q));
  int good = 1;
  for (uint32_t i = 0; i < 64; i++) good &= mem[i] == i;
  CHECK(good);
  /* Foo.SuccessSynchronous */
  memset(mem, 0, 64 * sizeof(uint32_t));
  OK(olLaunchKernel(NULL, d, k, &mem, sizeof mem, &ls));
  good = 1;
  for (uint32_t i = 0; i < 64; i++) good &= mem[i] == i;
  CHECK(good);
  /* Foo.SuccessThreaded (4 threads sharing one queue) */
  {
    pthread_t th[4];
    struct threaded_ctx c = {d, q, k};
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, threaded_launch, &c);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  }
  /* NoArgs.Success: NULL data and size 0 */
  OK(olLaunchKernel(q, d, kernel(prog, "empty_kernel"), NULL, 0, &ls));
  OK(olSyncQueue(q));
  /* MultiArgs.Success */
  {
    struct { char a; int *b; short c; } args = {3, (int *)mem, 5};
    OK(olLaunchKernel(q, d, kernel(prog, "multiargs"), &args, sizeof args, &ls));
    OK(olSyncQueue(q));
    good = 1;
    for (int i = 0; i < 64; i++) good &= ((int *)mem)[i] == 3 + 5 + i;
    CHECK(good);
  }
  /* Composite.Success */
  {
    struct { uint32_t n; struct { int a, b; } f; uint32_t *out; } args = {1, {2, 3}, mem};
    OK(olLaunchKernel(q, d, kernel(prog, "composite"), &args, sizeof args, &ls));
    OK(olSyncQueue(q));
    good = 1;
    for (uint32_t i = 0; i < 64; i++) good &= mem[i] == 1 + 2 + 3 + i;
    CHECK(good);
  }
  /* Byte.Success: a 1-byte argument block */
  {
    unsigned char c = 42;
    OK(olLaunchKernel(q, d, kernel(prog, "byte_arg"), &c, sizeof c, &ls));
    OK(olSyncQueue(q));
    ol_symbol_handle_t gb;
    uint32_t v = 0;
    void *gba = NULL;
    OK(olGetSymbol(prog, "g_last_byte", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &gb));
    OK(olGetSymbolInfo(gb, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, sizeof gba, &gba));
    OK(olMemcpy(NULL, &v, H, gba, d, sizeof v));
    CHECK(v == 42);
  }
  /* LocalMem.Success: 4 groups, 64 words of dynamic group memory */
  {
    ol_kernel_launch_size_args_t lm = {1, {4, 1, 1}, {64, 1, 1}, 64 * sizeof(uint32_t)};
    OK(olLaunchKernel(q, d, kernel(prog, "localmem"), &mem, sizeof mem, &lm));
    OK(olSyncQueue(q));
    good = 1;
    for (uint32_t i = 0; i < 4 * 64; i++) good &= mem[i] == (i % 64) * 2;
    CHECK(good);
    /* LocalMemReduction.Success */
    OK(olLaunchKernel(q, d, kernel(prog, "localmem_reduction"), &mem, sizeof mem, &lm));
    OK(olSyncQueue(q));
    good = 1;
    for (uint32_t i = 0; i < 4; i++) good &= mem[i] == 2 * 64;
    CHECK(good);
  }
  /* Global.Success: one kernel writes a global, another reads it */
  OK(olLaunchKernel(q, d, kernel(prog, "write_global"), NULL, 0, &ls));
  OK(olSyncQueue(q));
  OK(olLaunchKernel(q, d, kernel(prog, "read_global_array"), &mem, sizeof mem, &ls));
  OK(olSyncQueue(q));
  good = 1;
  for (uint32_t i = 0; i < 64; i++) good &= mem[i] == i * 2;
  CHECK(good);
  /* Global.InvalidNotAKernel */
  EXPECT(OL_ERRC_SYMBOL_KIND, olLaunchKernel(q, d, g, NULL, 0, &ls));
  /* GlobalCtor.Success / GlobalDtor.Success */
  OK(olLaunchKernel(q, d, kernel(prog, "global_ctor"), &mem, sizeof mem, &ls));
  OK(olSyncQueue(q));
  good = 1;
  for (uint32_t i = 0; i < 64; i++) good &= mem[i] == i + 100;
  CHECK(good);
  OK(olLaunchKernel(q, d, kernel(prog, "global_dtor"), NULL, 0, &ls));
  OK(olSyncQueue(q));
  /* Validation order: ArgumentsSize > 0 && ArgumentsData == NULL comes first. */
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(q, NULL, NULL, NULL, 8, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olLaunchKernel(q, NULL, k, &mem, sizeof mem, &ls));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olLaunchKernel(q, d, NULL, &mem, sizeof mem, &ls));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olLaunchKernel(q, d, k, &mem, sizeof mem, NULL));

  /* olLaunchHostFunctionKernelTest (non-blocking form): a host function
   * before a launch runs first. */
  {
    uint32_t seen = 1;
    memset(mem, 0, 64 * sizeof(uint32_t));
    OK(olLaunchHostFunction(q, fib_fn, &((uint32_t[3]){0, 0, 0})[2]));
    OK(olLaunchKernel(q, d, k, &mem, sizeof mem, &ls));
    OK(olSyncQueue(q));
    for (uint32_t i = 0; i < 64; i++) seen &= mem[i] == i;
    CHECK(seen);
  }

  /* olWaitEvents.Success / SuccessSingleQueue / SuccessMultipleEvents with
   * the sequence kernel: each launch depends on the previous ones. */
  ol_symbol_handle_t seq = kernel(prog, "sequence");
  ol_kernel_launch_size_args_t one = {1, {1, 1, 1}, {1, 1, 1}, 0};
  for (int variant = 0; variant < 3; variant++) {
    enum { N = 16 };
    ol_queue_handle_t qs[N];
    ol_event_handle_t evs[N];
    memset(mem, 0, N * sizeof(uint32_t));
    struct { uint32_t idx; uint32_t *mem; } args = {0, mem};
    for (int i = 0; i < N; i++) {
      args.idx = (uint32_t)i;
      qs[i] = q;
      if (variant != 1) OK(olCreateQueue(d, &qs[i]));
      if (i > 0) {
        if (variant == 2) OK(olWaitEvents(qs[i], evs, (size_t)i));
        else OK(olWaitEvents(qs[i], &evs[i - 1], 1));
      }
      OK(olLaunchKernel(qs[i], d, seq, &args, sizeof args, &one));
      OK(olCreateEvent(qs[i], &evs[i]));
    }
    OK(olSyncEvent(evs[N - 1]));
    good = 1;
    for (int i = 2; i < N; i++) good &= mem[i] == mem[i - 1] + mem[i - 2];
    CHECK(good && mem[0] == 1 && mem[N - 1] == 987);
    for (int i = 0; i < N; i++) {
      OK(olDestroyEvent(evs[i]));
      if (variant != 1) OK(olDestroyQueue(qs[i]));
    }
  }

  /* olCalculateOptimalOccupancy.* */
  size_t gs = 0;
  OK(olCalculateOptimalOccupancy(d, k, 0, &gs));
  CHECK(gs > 0);
  gs = 0;
  OK(olCalculateOptimalOccupancy(d, k, 1024, &gs));
  CHECK(gs > 0);
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCalculateOptimalOccupancy(d, NULL, 0, &gs));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCalculateOptimalOccupancy(NULL, k, 0, &gs));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCalculateOptimalOccupancy(d, k, 0, NULL));
  EXPECT(OL_ERRC_SYMBOL_KIND, olCalculateOptimalOccupancy(d, g, 0, &gs));

  OK(olMemFree(mem));
  OK(olMemFree(src));
  OK(olMemFree(dst));
  OK(olDestroyQueue(q));
  /* olDestroyProgram.* */
  OK(olDestroyProgram(prog));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olDestroyProgram(NULL));
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: conformance <kernels.so>\n");
    return 2;
  }
  g_image_path = argv[1];
  test_init(); /* leaves the library initialised */
  collect_devices();
  H = host_device();
  CHECK(H != NULL && g_devs[g_ndevs - 1] == H); /* the host device comes last */
  for (int i = 0; i < g_ndevs; i++)
    if (g_devs[i] != H) CPUS[NCPUS++] = g_devs[i];
  CHECK(NCPUS >= 1);
  size_t size;
  char *img = read_file(g_image_path, &size);
  /* Every CPU device, then the HOST device (no programs there). */
  for (int i = 0; i <= NCPUS; i++) {
    ol_device_handle_t d = i < NCPUS ? CPUS[i] : H;
    test_platform(d);
    test_device_info(d);
    test_alloc_free_info(d);
    test_register(d);
    test_fill(d);
    test_memcpy(d);
    test_queue_event(d);
    if (d != H) test_programs(d, img, size);
  }
  free(img);
  OK(olShutDown());
  return finish("conformance");
}
