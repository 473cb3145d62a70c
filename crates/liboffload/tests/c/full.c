/* full.c - the whole API on our library: memory of every type on every
 * device, mem info, fills, copies, queues, events, host functions, programs,
 * symbols, launches, occupancy, registration, and invalid/destroyed/foreign
 * handles and pointers. Usage: full <kernels.so> */
#include "common.h"

static ol_device_handle_t H, D0, D1;

static void test_devices(void) {
  CHECK(D0 && D1 && H);
  ol_platform_handle_t p;
  char name[64];
  ol_platform_backend_t b;
  OK(olGetDeviceInfo(D0, OL_DEVICE_INFO_PLATFORM, sizeof p, &p));
  OK(olGetPlatformInfo(p, OL_PLATFORM_INFO_NAME, sizeof name, name));
  CHECK(!strcmp(name, "host"));
  OK(olGetPlatformInfo(p, OL_PLATFORM_INFO_BACKEND, sizeof b, &b));
  CHECK(b == OL_PLATFORM_BACKEND_HOST);
  CHECK(dev_type(D0) == OL_DEVICE_TYPE_CPU);
  char uid0[64], uid1[64];
  OK(olGetDeviceInfo(D0, OL_DEVICE_INFO_UID, sizeof uid0, uid0));
  OK(olGetDeviceInfo(D1, OL_DEVICE_INFO_UID, sizeof uid1, uid1));
  CHECK(strcmp(uid0, uid1) != 0);
  uint64_t mem = 0;
  OK(olGetDeviceInfo(D0, OL_DEVICE_INFO_GLOBAL_MEM_SIZE, sizeof mem, &mem));
  CHECK(mem > (1ull << 26));
  /* Bogus device and platform handles are detected, not dereferenced. */
  char junk[64] = {0};
  uint32_t u;
  EXPECT(OL_ERRC_INVALID_DEVICE, olGetDeviceInfo((ol_device_handle_t)junk, OL_DEVICE_INFO_TYPE, 4, &u));
  EXPECT(OL_ERRC_INVALID_DEVICE, olGetDeviceInfo((ol_device_handle_t)0x10, OL_DEVICE_INFO_TYPE, 4, &u));
  EXPECT(OL_ERRC_INVALID_PLATFORM, olGetPlatformInfo((ol_platform_handle_t)junk, OL_PLATFORM_INFO_NAME, 8, junk));
  void *ptr;
  ol_queue_handle_t q;
  EXPECT(OL_ERRC_INVALID_DEVICE, olMemAlloc((ol_device_handle_t)junk, OL_ALLOC_TYPE_DEVICE, 8, &ptr));
  EXPECT(OL_ERRC_INVALID_DEVICE, olCreateQueue((ol_device_handle_t)junk, &q));
  EXPECT(OL_ERRC_INVALID_DEVICE, olMemcpy(NULL, junk, (ol_device_handle_t)junk, junk + 8, H, 4));
}

static void test_memory(void) {
  ol_device_handle_t devs[] = {D0, D1, H};
  for (int di = 0; di < 3; di++) {
    for (int t = 0; t < OL_ALLOC_TYPE_LAST; t++) {
      ol_device_handle_t d = devs[di];
      int *p = NULL;
      size_t n = 1000;
      OK(olMemAlloc(d, t, n * sizeof(int), (void **)&p));
      CHECK(p != NULL);
      int host[1000], back[1000];
      for (size_t i = 0; i < n; i++) host[i] = (int)i * 3;
      OK(olMemcpy(NULL, p, d, host, H, sizeof host));
      memset(back, 0, sizeof back);
      OK(olMemcpy(NULL, back, H, p, d, sizeof back));
      CHECK(memcmp(host, back, sizeof host) == 0);
      /* Mem info from an interior pointer. */
      ol_device_handle_t md = NULL;
      void *base = NULL;
      size_t size = 0, ss = 0;
      ol_alloc_type_t ty = 99;
      OK(olGetMemInfo(p + 10, OL_MEM_INFO_DEVICE, sizeof md, &md));
      OK(olGetMemInfo(p + 999, OL_MEM_INFO_BASE, sizeof base, &base));
      OK(olGetMemInfo(p, OL_MEM_INFO_SIZE, sizeof size, &size));
      OK(olGetMemInfo(p + 1, OL_MEM_INFO_TYPE, sizeof ty, &ty));
      CHECK(md == d && base == p && size == n * sizeof(int) && ty == (ol_alloc_type_t)t);
      OK(olGetMemInfoSize(p, OL_MEM_INFO_DEVICE, &ss)); CHECK(ss == sizeof(void *));
      OK(olGetMemInfoSize(p, OL_MEM_INFO_BASE, &ss)); CHECK(ss == sizeof(void *));
      OK(olGetMemInfoSize(p, OL_MEM_INFO_SIZE, &ss)); CHECK(ss == sizeof(size_t));
      OK(olGetMemInfoSize(p, OL_MEM_INFO_TYPE, &ss)); CHECK(ss == sizeof(ol_alloc_type_t));
      EXPECT(OL_ERRC_INVALID_SIZE, olGetMemInfo(p, OL_MEM_INFO_SIZE, 4, &size));
      EXPECT(OL_ERRC_INVALID_SIZE, olGetMemInfo(p, OL_MEM_INFO_SIZE, 0, &size));
      EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetMemInfo(p, OL_MEM_INFO_SIZE, 8, NULL));
      EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetMemInfo(p, OL_MEM_INFO_LAST, 8, &size));
      EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetMemInfoSize(p, (ol_mem_info_t)55, &ss));
      EXPECT(OL_ERRC_NOT_FOUND, olGetMemInfo((char *)p + n * sizeof(int) + 64, OL_MEM_INFO_SIZE, 8, &size));
      /* Fills with several pattern sizes, synchronous and queued. */
      static const size_t pats[] = {1, 2, 3, 4, 8, 16};
      ol_queue_handle_t q;
      OK(olCreateQueue(d, &q));
      for (size_t k = 0; k < sizeof pats / sizeof pats[0]; k++) {
        unsigned char pat[16], got[96];
        for (size_t i = 0; i < pats[k]; i++) pat[i] = (unsigned char)(0xA0 + i + k);
        size_t fs = pats[k] * (96 / pats[k]);
        OK(olMemFill(k % 2 ? q : NULL, p, pats[k], pat, fs));
        OK(olSyncQueue(q));
        OK(olMemcpy(NULL, got, H, p, d, fs));
        int good = 1;
        for (size_t i = 0; i < fs; i++) good &= got[i] == pat[i % pats[k]];
        CHECK(good);
      }
      int v = 7;
      EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(q, p, 4, &v, 6));
      EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(NULL, p, 4, &v, n * sizeof(int) + 4));
      EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemFill(q, NULL, 4, &v, 4));
      EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemFill(q, p, 4, NULL, 4));
      OK(olDestroyQueue(q));
      /* Interior pointer free is refused; the allocation survives. */
      EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(p + 4));
      OK(olGetMemInfo(p, OL_MEM_INFO_SIZE, sizeof size, &size));
      OK(olMemFree(p));
      EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(p)); /* double free */
      EXPECT(OL_ERRC_NOT_FOUND, olGetMemInfo(p, OL_MEM_INFO_SIZE, sizeof size, &size));
    }
  }
  void *p;
  EXPECT(OL_ERRC_INVALID_SIZE, olMemAlloc(D0, OL_ALLOC_TYPE_DEVICE, 0, &p));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olMemAlloc(D0, OL_ALLOC_TYPE_LAST, 8, &p));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olMemAlloc(D0, (ol_alloc_type_t)12345, 8, &p));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemAlloc(D0, OL_ALLOC_TYPE_DEVICE, 8, NULL));
  void *foreign = malloc(64);
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(foreign));
  free(foreign);
  /* Copies between devices, and within one device, queued and not. */
  int *a, *b, *c;
  OK(olMemAlloc(D0, OL_ALLOC_TYPE_DEVICE, 4096, (void **)&a));
  OK(olMemAlloc(D0, OL_ALLOC_TYPE_DEVICE, 4096, (void **)&b));
  OK(olMemAlloc(D1, OL_ALLOC_TYPE_DEVICE, 4096, (void **)&c));
  int h[1024], back[1024];
  for (int i = 0; i < 1024; i++) h[i] = i ^ 0x5555;
  ol_queue_handle_t q;
  OK(olCreateQueue(D0, &q));
  OK(olMemcpy(q, a, D0, h, H, sizeof h));
  OK(olMemcpy(q, b, D0, a, D0, sizeof h));
  OK(olSyncQueue(q)); /* queues are asynchronous: a NULL-queue copy is not ordered after them */
  OK(olMemcpy(NULL, c, D1, b, D0, sizeof h));
  OK(olMemcpy(q, back, H, c, D1, sizeof h));
  OK(olSyncQueue(q));
  CHECK(memcmp(h, back, sizeof h) == 0);
  OK(olMemcpy(q, back, H, a, D0, 0));
  OK(olDestroyQueue(q));
  OK(olMemFree(a));
  OK(olMemFree(b));
  OK(olMemFree(c));
}

static volatile int g_flag;
static void host_fn(void *ud) { g_flag += *(int *)ud; }

static void test_queues_events(void) {
  ol_device_handle_t devs[] = {D0, H};
  for (int di = 0; di < 2; di++) {
    ol_device_handle_t d = devs[di];
    ol_queue_handle_t q, q2;
    OK(olCreateQueue(d, &q));
    OK(olCreateQueue(d, &q2));
    CHECK(q != q2);
    ol_device_handle_t qd = NULL;
    bool empty = false;
    size_t s = 0;
    OK(olGetQueueInfoSize(q, OL_QUEUE_INFO_DEVICE, &s)); CHECK(s == sizeof(void *));
    OK(olGetQueueInfoSize(q, OL_QUEUE_INFO_EMPTY, &s)); CHECK(s == sizeof(bool));
    OK(olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, sizeof qd, &qd));
    CHECK(qd == d);
    OK(olSyncQueue(q));
    OK(olGetQueueInfo(q, OL_QUEUE_INFO_EMPTY, sizeof empty, &empty));
    CHECK(empty);
    EXPECT(OL_ERRC_INVALID_SIZE, olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, 4, &qd));
    EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetQueueInfo(q, OL_QUEUE_INFO_LAST, 8, &qd));
    EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetQueueInfoSize(q, (ol_queue_info_t)9, &s));
    int inc = 5;
    g_flag = 0;
    OK(olLaunchHostFunction(q, host_fn, &inc));
    OK(olLaunchHostFunction(q, host_fn, &inc));
    OK(olSyncQueue(q));
    CHECK(g_flag == 10);
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olLaunchHostFunction(q, NULL, NULL));
    /* Events. */
    ol_event_handle_t e, e2;
    OK(olCreateEvent(q, &e));
    OK(olCreateEvent(q2, &e2));
    OK(olSyncEvent(e));
    ol_queue_handle_t eq = NULL;
    bool done = false;
    OK(olGetEventInfoSize(e, OL_EVENT_INFO_QUEUE, &s)); CHECK(s == sizeof(void *));
    OK(olGetEventInfoSize(e, OL_EVENT_INFO_IS_COMPLETE, &s)); CHECK(s == sizeof(bool));
    OK(olGetEventInfo(e, OL_EVENT_INFO_QUEUE, sizeof eq, &eq));
    CHECK(eq == q);
    OK(olGetEventInfo(e, OL_EVENT_INFO_IS_COMPLETE, sizeof done, &done));
    CHECK(done);
    EXPECT(OL_ERRC_INVALID_SIZE, olGetEventInfo(e, OL_EVENT_INFO_QUEUE, 2, &eq));
    EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetEventInfo(e, OL_EVENT_INFO_LAST, 8, &eq));
    ol_event_handle_t evs[2] = {e, e2};
    OK(olWaitEvents(q2, evs, 2));
    OK(olWaitEvents(q, evs, 0));
    ol_event_handle_t with_null[2] = {e, NULL};
    EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olWaitEvents(q, with_null, 2));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olWaitEvents(q, NULL, 1));
    EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateEvent(q, NULL));
    /* Destroying the queue keeps its events valid. */
    OK(olDestroyQueue(q));
    OK(olGetEventInfo(e, OL_EVENT_INFO_QUEUE, sizeof eq, &eq));
    OK(olSyncEvent(e));
    /* Destroyed and bogus handles. */
    EXPECT(OL_ERRC_INVALID_QUEUE, olSyncQueue(q));
    EXPECT(OL_ERRC_INVALID_QUEUE, olDestroyQueue(q));
    EXPECT(OL_ERRC_INVALID_QUEUE, olCreateEvent(q, &e2));
    EXPECT(OL_ERRC_INVALID_QUEUE, olLaunchHostFunction(q, host_fn, &inc));
    EXPECT(OL_ERRC_INVALID_QUEUE, olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, 8, &qd));
    EXPECT(OL_ERRC_INVALID_QUEUE, olWaitEvents(q, evs, 1));
    char junk[64] = {0};
    EXPECT(OL_ERRC_INVALID_QUEUE, olSyncQueue((ol_queue_handle_t)junk));
    EXPECT(OL_ERRC_INVALID_EVENT, olSyncEvent((ol_event_handle_t)junk));
    int x = 1, y = 0;
    EXPECT(OL_ERRC_INVALID_QUEUE, olMemcpy((ol_queue_handle_t)junk, &y, H, &x, H, 4));
    OK(olDestroyEvent(e));
    EXPECT(OL_ERRC_INVALID_EVENT, olDestroyEvent(e));
    EXPECT(OL_ERRC_INVALID_EVENT, olSyncEvent(e));
    EXPECT(OL_ERRC_INVALID_EVENT, olGetEventInfo(e, OL_EVENT_INFO_IS_COMPLETE, 1, &done));
    EXPECT(OL_ERRC_INVALID_EVENT, olWaitEvents(q2, evs, 2));
    OK(olDestroyEvent(e2));
    OK(olDestroyQueue(q2));
  }
}

static void test_register(void) {
  static char buf[4096];
  void *pinned = NULL, *p2 = NULL;
  OK(olMemRegister(D0, buf, sizeof buf, 0, &pinned));
  CHECK(pinned == buf);
  OK(olMemRegister(D0, buf + 100, 100, 0, &p2)); /* inside: a second user */
  CHECK(p2 == buf + 100);
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemRegister(D0, buf + 4000, 200, 0, &p2)); /* partial overlap */
  EXPECT(OL_ERRC_INVALID_SIZE, olMemRegister(D0, buf, 0, 0, &p2));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemRegister(D0, NULL, 8, 0, &p2));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemRegister(D0, buf, 8, 0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemRegister(NULL, buf, 8, 0, &p2));
  OK(olMemUnregister(D0, buf));
  OK(olMemUnregister(D0, buf));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemUnregister(D0, buf));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olMemUnregister(D0, NULL));
  EXPECT(OL_ERRC_INVALID_NULL_HANDLE, olMemUnregister(NULL, buf));
}

static void test_programs(const char *path) {
  size_t size;
  char *img = read_file(path, &size);
  bool valid = false;
  OK(olIsValidBinary(D0, img, size, &valid));
  CHECK(valid);
  OK(olIsValidBinary(H, img, size, &valid));
  CHECK(!valid);
  OK(olIsValidBinary(D0, img, 0, &valid));
  CHECK(!valid);
  ol_program_handle_t prog, prog1;
  EXPECT(OL_ERRC_INVALID_BINARY, olCreateProgram(D0, "garbage garbage garbage", 24, &prog));
  EXPECT(OL_ERRC_INVALID_BINARY, olCreateProgram(D0, img, 0, &prog));
  EXPECT(OL_ERRC_UNSUPPORTED, olCreateProgram(H, img, size, &prog));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCreateProgram(D0, img, size, NULL));
  OK(olCreateProgram(D0, img, size, &prog));
  OK(olCreateProgram(D1, img, size, &prog1));
  memset(img, 0, size); /* the program holds its own copy */
  free(img);

  ol_symbol_handle_t k, k2, g, tab, k_other;
  OK(olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_KERNEL, &k));
  OK(olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_KERNEL, &k2));
  CHECK(k == k2);
  OK(olGetSymbol(prog1, "add_value", OL_SYMBOL_KIND_KERNEL, &k_other));
  CHECK(k_other != k);
  OK(olGetSymbol(prog, "g_counter", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &g));
  OK(olGetSymbol(prog, "g_table", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &tab));
  EXPECT(OL_ERRC_SYMBOL_KIND, olGetSymbol(prog, "g_counter", OL_SYMBOL_KIND_KERNEL, &k2));
  EXPECT(OL_ERRC_SYMBOL_KIND, olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &k2));
  EXPECT(OL_ERRC_NOT_FOUND, olGetSymbol(prog, "no_such_kernel", OL_SYMBOL_KIND_KERNEL, &k2));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_LAST, &k2));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetSymbol(prog, NULL, OL_SYMBOL_KIND_KERNEL, &k2));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_KERNEL, NULL));

  /* Symbol info. */
  ol_symbol_kind_t kind = 9;
  size_t s = 0, gsize = 0;
  void *gaddr = NULL;
  OK(olGetSymbolInfoSize(k, OL_SYMBOL_INFO_KIND, &s)); CHECK(s == sizeof(ol_symbol_kind_t));
  OK(olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, sizeof kind, &kind)); CHECK(kind == OL_SYMBOL_KIND_KERNEL);
  OK(olGetSymbolInfo(g, OL_SYMBOL_INFO_KIND, sizeof kind, &kind)); CHECK(kind == OL_SYMBOL_KIND_GLOBAL_VARIABLE);
  EXPECT(OL_ERRC_SYMBOL_KIND, olGetSymbolInfo(k, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, 8, &gaddr));
  EXPECT(OL_ERRC_SYMBOL_KIND, olGetSymbolInfoSize(k, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, &s));
  OK(olGetSymbolInfoSize(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, &s)); CHECK(s == sizeof(void *));
  OK(olGetSymbolInfoSize(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, &s)); CHECK(s == sizeof(size_t));
  OK(olGetSymbolInfo(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, sizeof gaddr, &gaddr));
  OK(olGetSymbolInfo(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, sizeof gsize, &gsize));
  CHECK(gaddr != NULL && gsize == sizeof(int));
  OK(olGetSymbolInfo(tab, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, sizeof gsize, &gsize));
  CHECK(gsize == 8 * sizeof(double));
  EXPECT(OL_ERRC_INVALID_SIZE, olGetSymbolInfo(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, 4, &gsize));
  EXPECT(OL_ERRC_INVALID_ENUMERATION, olGetSymbolInfo(g, OL_SYMBOL_INFO_LAST, 8, &gsize));
  /* The global is device memory: read and write it with olMemcpy. */
  int gv = 0;
  OK(olMemcpy(NULL, &gv, H, gaddr, D0, sizeof gv));
  CHECK(gv == 42);
  gv = 1000;
  OK(olMemcpy(NULL, gaddr, D0, &gv, H, sizeof gv));

  /* Launches. */
  int *x;
  OK(olMemAlloc(D0, OL_ALLOC_TYPE_DEVICE, 256 * sizeof(int), (void **)&x));
  OK(olMemFill(NULL, x, 4, &(int){1}, 256 * sizeof(int)));
  struct { int *x; int v; size_t n; } args = {x, 10, 256};
  ol_kernel_launch_size_args_t ls = {1, {4, 1, 1}, {64, 1, 1}, 0};
  ol_queue_handle_t q, q1;
  OK(olCreateQueue(D0, &q));
  OK(olCreateQueue(D1, &q1));
  OK(olLaunchKernel(q, D0, k, &args, sizeof args, &ls));
  OK(olSyncQueue(q));
  OK(olLaunchKernel(NULL, D0, k, &args, sizeof args, &ls));
  ol_code_location_t loc = {"test_programs", __FILE__, __LINE__, 0};
  OK(olLaunchKernelWithCodeLoc(q, D0, k, &args, sizeof args, &ls, &loc));
  OK(olSyncQueue(q));
  int back[256];
  OK(olMemcpy(NULL, back, H, x, D0, sizeof back));
  int good = 1;
  for (int i = 0; i < 256; i++) good &= back[i] == 31;
  CHECK(good);
  /* read_global sees the value written through olMemcpy. */
  int *out;
  OK(olMemAlloc(D0, OL_ALLOC_TYPE_MANAGED, sizeof(int), (void **)&out));
  *out = 5;
  ol_symbol_handle_t rg;
  OK(olGetSymbol(prog, "read_global", OL_SYMBOL_KIND_KERNEL, &rg));
  ol_kernel_launch_size_args_t one = {1, {1, 1, 1}, {1, 1, 1}, 0};
  OK(olLaunchKernel(NULL, D0, rg, &out, sizeof out, &one));
  CHECK(*out == 1005);
  /* Launch errors. */
  EXPECT(OL_ERRC_SYMBOL_KIND, olLaunchKernel(q, D0, g, &args, sizeof args, &ls));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(q, D0, k, NULL, 8, &ls));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olLaunchKernel(q, D0, k, &args, sizeof args, NULL));
  EXPECT(OL_ERRC_INVALID_DEVICE, olLaunchKernel(q1, D0, k, &args, sizeof args, &ls)); /* queue of D1 */
  EXPECT(OL_ERRC_INVALID_DEVICE, olLaunchKernel(q1, D1, k, &args, sizeof args, &ls)); /* kernel of D0 */
  ol_kernel_launch_size_args_t zero = {1, {0, 1, 1}, {64, 1, 1}, 0};
  EXPECT(OL_ERRC_INVALID_SIZE, olLaunchKernel(q, D0, k, &args, sizeof args, &zero));
  ol_kernel_launch_size_args_t huge = {1, {1, 1, 1}, {4096, 1, 1}, 0};
  CHECK(olLaunchKernel(q, D0, k, &args, sizeof args, &huge) != NULL);
  char junk[64] = {0};
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(q, D0, (ol_symbol_handle_t)junk, &args, sizeof args, &ls));
  /* Occupancy. */
  size_t gs = 0;
  OK(olCalculateOptimalOccupancy(D0, k, 0, &gs));
  CHECK(gs >= 1 && gs <= 1024);
  EXPECT(OL_ERRC_SYMBOL_KIND, olCalculateOptimalOccupancy(D0, g, 0, &gs));
  EXPECT(OL_ERRC_INVALID_NULL_POINTER, olCalculateOptimalOccupancy(D0, k, 0, NULL));
  EXPECT(OL_ERRC_INVALID_DEVICE, olCalculateOptimalOccupancy(D1, k, 0, &gs));
  /* Destroying a program invalidates its symbols. */
  OK(olDestroyProgram(prog));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olDestroyProgram(prog));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_KERNEL, &k2));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, 4, &kind));
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(q, D0, k, &args, sizeof args, &ls));
  /* The other device's program is unaffected. */
  struct { int *x; int v; size_t n; } args1 = {x, 1, 256};
  OK(olLaunchKernel(q1, D1, k_other, &args1, sizeof args1, &ls));
  OK(olSyncQueue(q1));
  OK(olMemcpy(NULL, back, H, x, D0, sizeof back));
  CHECK(back[255] == 32);
  OK(olDestroyProgram(prog1));
  OK(olDestroyQueue(q));
  OK(olDestroyQueue(q1));
  OK(olMemFree(x));
  OK(olMemFree(out));
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: full <kernels.so>\n");
    return 2;
  }
  MUST(olInit());
  collect_devices();
  H = host_device();
  D0 = offload_device(0);
  D1 = offload_device(1);
  test_devices();
  test_memory();
  test_queues_events();
  test_register();
  test_programs(argv[1]);
  /* Leaked objects are released by the last olShutDown. */
  void *leak;
  ol_queue_handle_t lq;
  OK(olMemAlloc(D0, OL_ALLOC_TYPE_DEVICE, 1 << 20, &leak));
  OK(olCreateQueue(D0, &lq));
  OK(olShutDown());
  EXPECT(OL_ERRC_UNINITIALIZED, olMemFree(leak));
  MUST(olInit());
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(leak)); /* a new instance does not know it */
  EXPECT(OL_ERRC_INVALID_QUEUE, olSyncQueue(lq));
  OK(olShutDown());
  return finish("full");
}
