/* portable.c - checks that pass on LLVM 22's libLLVMOffload.so.22.1 and on
 * ours: initialisation, device listing, every platform/device info
 * enumerator (sizes, values, NUL-terminated strings, short buffers, bad
 * enumerators), null arguments, host-to-host copies. */
#include "common.h"

static const char *dev_prop_names[] = {
    "TYPE", "PLATFORM", "NAME", "PRODUCT_NAME", "UID", "VENDOR", "DRIVER_VERSION",
    "MAX_WORK_GROUP_SIZE", "MAX_WORK_GROUP_SIZE_PER_DIMENSION", "MAX_WORK_SIZE",
    "MAX_WORK_SIZE_PER_DIMENSION", "VENDOR_ID", "NUM_COMPUTE_UNITS", "MAX_CLOCK_FREQUENCY",
    "MEMORY_CLOCK_RATE", "ADDRESS_BITS", "MAX_MEM_ALLOC_SIZE", "GLOBAL_MEM_SIZE",
    "WORK_GROUP_LOCAL_MEM_SIZE", "SINGLE_FP_CONFIG", "DOUBLE_FP_CONFIG", "HALF_FP_CONFIG",
    "NATIVE_VECTOR_WIDTH_CHAR", "NATIVE_VECTOR_WIDTH_SHORT", "NATIVE_VECTOR_WIDTH_INT",
    "NATIVE_VECTOR_WIDTH_LONG", "NATIVE_VECTOR_WIDTH_FLOAT", "NATIVE_VECTOR_WIDTH_DOUBLE",
    "NATIVE_VECTOR_WIDTH_HALF"};

/* Expected size of each device info enumerator; 0 = string. */
static size_t dev_prop_size(int p) {
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

static void check_string(const char *what, const char *buf, size_t size) {
  (void)what;
  CHECK(size >= 1);
  CHECK(buf[size - 1] == 0);
  CHECK(strlen(buf) == size - 1);
}

static void check_platform(ol_platform_handle_t p) {
  for (int prop = 0; prop < OL_PLATFORM_INFO_LAST; prop++) {
    size_t size = 0;
    OK(olGetPlatformInfoSize(p, prop, &size));
    char buf[512];
    memset(buf, 0x7f, sizeof buf);
    CHECK(size > 0 && size < sizeof buf);
    OK(olGetPlatformInfo(p, prop, size, buf));
    OK(olGetPlatformInfo(p, prop, sizeof buf, buf)); /* bigger buffer is fine */
    EXPECT(OL_ERRC_INVALID_SIZE, olGetPlatformInfo(p, prop, size - 1 ? size - 1 : 0, buf));
    EXPECT(OL_ERRC_INVALID_SIZE, olGetPlatformInfo(p, prop, 0, buf));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetPlatformInfo(p, prop, size, NULL));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetPlatformInfoSize(p, prop, NULL));
    if (prop == OL_PLATFORM_INFO_BACKEND) {
      ol_platform_backend_t b;
      CHECK(size == sizeof b);
      memcpy(&b, buf, sizeof b);
      CHECK(b < OL_PLATFORM_BACKEND_LAST);
    } else {
      check_string("platform string", buf, size);
      CHECK(size > 1);
    }
  }
  uint32_t u;
  size_t s;
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetPlatformInfo(p, OL_PLATFORM_INFO_LAST, 4, &u));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetPlatformInfo(p, (ol_platform_info_t)1000, 4, &u));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetPlatformInfoSize(p, (ol_platform_info_t)77, &s));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetPlatformInfo(NULL, OL_PLATFORM_INFO_NAME, 8, &u));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetPlatformInfoSize(NULL, OL_PLATFORM_INFO_NAME, &s));
}

static void check_device(ol_device_handle_t d) {
  for (int prop = 0; prop < OL_DEVICE_INFO_LAST; prop++) {
    size_t size = 0, want = dev_prop_size(prop);
    ol_result_t r = olGetDeviceInfoSize(d, prop, &size);
    if (r) {
      fprintf(stderr, "device info %s: %s %s\n", dev_prop_names[prop], errc_name(r), r->Details);
      g_failures++;
      continue;
    }
    g_checks++;
    if (want) CHECK(size == want);
    else CHECK(size >= 1 && size < 1024);
    unsigned char buf[1100];
    memset(buf, 0x5a, sizeof buf);
    OK(olGetDeviceInfo(d, prop, size, buf));
    if (!want) check_string(dev_prop_names[prop], (char *)buf, size);
    OK(olGetDeviceInfo(d, prop, sizeof buf, buf));
    EXPECT(OL_ERRC_INVALID_SIZE, olGetDeviceInfo(d, prop, size - 1, buf));
    EXPECT(OL_ERRC_INVALID_SIZE, olGetDeviceInfo(d, prop, 0, buf));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetDeviceInfo(d, prop, size, NULL));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetDeviceInfoSize(d, prop, NULL));
    EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetDeviceInfo(NULL, prop, size, buf));
    EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetDeviceInfoSize(NULL, prop, &size));
    /* WithCodeLoc variant behaves the same. */
    ol_code_location_t loc = {"check_device", __FILE__, __LINE__, 1};
    OK(olGetDeviceInfoWithCodeLoc(d, prop, size, buf, &loc));
    OK(olGetDeviceInfoSizeWithCodeLoc(d, prop, &size, &loc));
  }
  /* Values. */
  ol_device_type_t t;
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof t, &t));
  CHECK(t == OL_DEVICE_TYPE_GPU || t == OL_DEVICE_TYPE_CPU || t == OL_DEVICE_TYPE_HOST);
  ol_platform_handle_t p = NULL;
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_PLATFORM, sizeof p, &p));
  CHECK(p != NULL);
  check_platform(p);
  ol_platform_backend_t b;
  OK(olGetPlatformInfo(p, OL_PLATFORM_INFO_BACKEND, sizeof b, &b));
  if (t == OL_DEVICE_TYPE_HOST) CHECK(b == OL_PLATFORM_BACKEND_HOST);
  uint32_t wg = 0, bits = 0;
  ol_dimensions_t dims;
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE, sizeof wg, &wg));
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE_PER_DIMENSION, sizeof dims, &dims));
  CHECK(wg >= 1 && dims.x >= 1 && dims.y >= 1 && dims.z >= 1 && dims.x <= wg);
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_ADDRESS_BITS, sizeof bits, &bits));
  CHECK(bits == 64);
  uint32_t cu = 0;
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_NUM_COMPUTE_UNITS, sizeof cu, &cu));
  CHECK(cu >= 1);
  ol_device_fp_capability_flags_t fp = 0;
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_DOUBLE_FP_CONFIG, sizeof fp, &fp));
  CHECK(fp < OL_DEVICE_FP_CAPABILITY_FLAG_LAST);
  char name[256];
  OK(olGetDeviceInfo(d, OL_DEVICE_INFO_NAME, sizeof name, name));
  CHECK(strlen(name) > 0);
  /* Unknown enumerators. */
  uint32_t u;
  size_t s;
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetDeviceInfo(d, OL_DEVICE_INFO_LAST, 4, &u));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetDeviceInfo(d, (ol_device_info_t)1000, 4, &u));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetDeviceInfo(d, (ol_device_info_t)0x7ffffffe, 8, &s));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetDeviceInfoSize(d, (ol_device_info_t)29, &s));
}

static int g_seen;
static bool stop_after_one(ol_device_handle_t d, void *ud) {
  (void)d;
  (*(int *)ud)++;
  return false;
}

int main(void) {
  /* Before olInit. */
  EXPECT(OL_ERRC_UNINITIALIZED, olIterateDevices(collect_cb, NULL));
  EXPECT(OL_ERRC_UNINITIALIZED, olShutDown());
  EXPECT(OL_ERRC_UNINITIALIZED, olMemFree((void *)0x1000));
  uint32_t u;
  EXPECT(OL_ERRC_UNINITIALIZED, olGetDeviceInfo((ol_device_handle_t)0x1000, OL_DEVICE_INFO_TYPE, 4, &u));

  OK(olInit());
  ol_code_location_t loc = {"main", __FILE__, __LINE__, 0};
  OK(olInitWithCodeLoc(&loc)); /* reference count 2 */
  collect_devices();
  CHECK(g_ndevs >= 1);
  int hosts = 0;
  for (int i = 0; i < g_ndevs; i++) hosts += dev_type(g_devs[i]) == OL_DEVICE_TYPE_HOST;
  CHECK(hosts == 1);
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olIterateDevices(NULL, NULL));
  OK(olIterateDevices(stop_after_one, &g_seen));
  CHECK(g_seen == 1);
  for (int i = 0; i < g_ndevs; i++) check_device(g_devs[i]);

  /* Host-to-host copies through the host device. */
  ol_device_handle_t h = host_device();
  int a = 42, b = 0;
  OK(olMemcpy(NULL, &b, h, &a, h, sizeof a));
  CHECK(b == 42);
  OK(olMemcpy(NULL, &b, h, &a, h, 0));
  size_t big = 1 << 20;
  char *src = malloc(big), *dst = calloc(1, big);
  for (size_t i = 0; i < big; i++) src[i] = (char)(i * 7);
  OK(olMemcpyWithCodeLoc(NULL, dst, h, src, h, big, &loc));
  CHECK(memcmp(src, dst, big) == 0);
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemcpy(NULL, NULL, h, &a, h, 4));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemcpy(NULL, &b, h, NULL, h, 4));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemcpy(NULL, &b, NULL, &a, h, 4));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemcpy(NULL, &b, h, &a, NULL, 4));

  /* Binaries: garbage is not valid; null arguments. */
  bool valid = true;
  OK(olIsValidBinary(h, src, 64, &valid));
  CHECK(!valid);
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olIsValidBinary(h, NULL, 64, &valid));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olIsValidBinary(h, src, 64, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olIsValidBinary(NULL, src, 64, &valid));

  /* Memory that liboffload did not allocate. */
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemFree(NULL));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(dst));
  size_t s;
  EXPECT(OL_ERRC_NOT_FOUND, olGetMemInfo(dst, OL_MEM_INFO_SIZE, sizeof s, &s));
  EXPECT(OL_ERRC_NOT_FOUND, olGetMemInfoSize(dst, OL_MEM_INFO_SIZE, &s));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetMemInfo(NULL, OL_MEM_INFO_SIZE, sizeof s, &s));

  /* Null handles and pointers everywhere (validated before any work). */
  void *p;
  ol_queue_handle_t q;
  ol_event_handle_t e;
  ol_program_handle_t prog;
  ol_symbol_handle_t sym;
  ol_kernel_launch_size_args_t ls = {1, {1, 1, 1}, {1, 1, 1}, 0};
  EXPECT(OL_ERRC_INVALID_SIZE, olMemAlloc(h, OL_ALLOC_TYPE_DEVICE, 0, &p));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemAlloc(NULL, OL_ALLOC_TYPE_DEVICE, 16, &p));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCreateQueue(NULL, &q));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateQueue(h, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olSyncQueue(NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olDestroyQueue(NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCreateEvent(NULL, &e));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olDestroyEvent(NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olSyncEvent(NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olWaitEvents(NULL, &e, 1));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olLaunchHostFunction(NULL, NULL, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetQueueInfo(NULL, OL_QUEUE_INFO_DEVICE, 8, &p));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetQueueInfoSize(NULL, OL_QUEUE_INFO_DEVICE, &s));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetEventInfo(NULL, OL_EVENT_INFO_QUEUE, 8, &p));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetEventInfoSize(NULL, OL_EVENT_INFO_QUEUE, &s));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetSymbolInfo(NULL, OL_SYMBOL_INFO_KIND, 4, &u));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetSymbolInfoSize(NULL, OL_SYMBOL_INFO_KIND, &s));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetSymbol(NULL, "x", OL_SYMBOL_KIND_KERNEL, &sym));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olDestroyProgram(NULL));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateProgram(h, NULL, 16, &prog));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCreateProgram(NULL, src, 16, &prog));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olLaunchKernel(NULL, h, NULL, NULL, 0, &ls));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olLaunchKernel(NULL, NULL, (ol_symbol_handle_t)src, NULL, 0, &ls));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCalculateOptimalOccupancy(h, NULL, 0, &s));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(NULL, dst, 3, &a, 4));
  /* Validation order with several bad arguments (the header's @returns
   * order): olMemcpy checks both device handles before the pointers;
   * olLaunchKernel checks ArgumentsSize/ArgumentsData before the handles;
   * sizes come before handles where the header lists them first. */
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemcpy(NULL, NULL, NULL, NULL, NULL, 0));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemcpy(NULL, NULL, NULL, &a, h, 4));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemcpy(NULL, NULL, h, NULL, NULL, 4));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemcpy(NULL, NULL, h, NULL, h, 4));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(NULL, NULL, NULL, NULL, 8, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olLaunchKernel(NULL, NULL, NULL, NULL, 0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olLaunchKernel(NULL, h, (ol_symbol_handle_t)src, NULL, 0, NULL));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemAlloc(NULL, OL_ALLOC_TYPE_DEVICE, 0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemAlloc(NULL, OL_ALLOC_TYPE_DEVICE, 8, NULL));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemRegister(NULL, NULL, 0, 0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemRegister(NULL, NULL, 8, 0, NULL));
  EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(NULL, NULL, 3, NULL, 8));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemFill(NULL, NULL, 4, &a, 8));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetDeviceInfo(NULL, OL_DEVICE_INFO_TYPE, 0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olGetDeviceInfo(NULL, OL_DEVICE_INFO_TYPE, 4, NULL));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetMemInfo(NULL, OL_MEM_INFO_FORCE_UINT32, 0, NULL));
  EXPECT(OL_ERRC_NOT_FOUND, olGetMemInfo((void *)0x1234, OL_MEM_INFO_FORCE_UINT32, 8, &s));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olWaitEvents(NULL, NULL, 1));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCreateProgram(NULL, NULL, 0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateProgram(h, NULL, 0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olCalculateOptimalOccupancy(NULL, NULL, 0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olIterateDevices(NULL, NULL));

  /* Reference counting: two inits, two shutdowns, then uninitialised. */
  OK(olShutDown());
  OK(olIterateDevices(collect_cb, NULL)); /* still initialised */
  OK(olShutDownWithCodeLoc(&loc));
  EXPECT(OL_ERRC_UNINITIALIZED, olShutDown());
  EXPECT(OL_ERRC_UNINITIALIZED, olIterateDevices(collect_cb, NULL));
  EXPECT(OL_ERRC_UNINITIALIZED, olMemcpy(NULL, &b, h, &a, h, 4));
  /* And it comes back. */
  OK(olInit());
  int before = g_ndevs / 2; /* collect_cb appended the list once more above */
  collect_devices();
  CHECK(g_ndevs == before);
  b = 0;
  h = host_device();
  OK(olMemcpy(NULL, &b, h, &a, h, sizeof a));
  CHECK(b == 42);
  OK(olShutDown());
  free(src);
  free(dst);
  return finish("portable");
}
