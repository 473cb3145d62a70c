/* ol_devices.c - a liboffload C API program built with
 * `pkg-config --cflags --libs offload`: lists the devices, round-trips a
 * buffer through the first non-host one, and prints which library file
 * provides olInit (the installed one, found through the rpath). */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <dlfcn.h>
#include <OffloadAPI.h>

#define MUST(call)                                                        \
  do {                                                                    \
    ol_result_t r_ = (call);                                              \
    if (r_ != OL_SUCCESS) {                                               \
      fprintf(stderr, "%s failed: %s\n", #call, r_->Details);             \
      return 1;                                                           \
    }                                                                     \
  } while (0)

struct found {
  ol_device_handle_t host, device;
  int count;
};

static bool visit(ol_device_handle_t d, void *user) {
  struct found *f = user;
  ol_device_type_t type;
  if (olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof type, &type) != OL_SUCCESS)
    return false;
  char name[128] = "";
  olGetDeviceInfo(d, OL_DEVICE_INFO_NAME, sizeof name, name);
  printf("device %d: %s%s\n", f->count++, name,
         type == OL_DEVICE_TYPE_HOST ? " (the host)" : "");
  if (type == OL_DEVICE_TYPE_HOST)
    f->host = d;
  else if (!f->device)
    f->device = d;
  return true;
}

int main(void) {
  MUST(olInit());
  struct found f = {0};
  MUST(olIterateDevices(visit, &f));
  if (!f.host || !f.device) {
    fprintf(stderr, "no host or no offload device\n");
    return 1;
  }
  int in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = i * 3;
  void *p;
  MUST(olMemAlloc(f.device, OL_ALLOC_TYPE_DEVICE, sizeof in, &p));
  MUST(olMemcpy(NULL, p, f.device, in, f.host, sizeof in));
  MUST(olMemcpy(NULL, out, f.host, p, f.device, sizeof out));
  MUST(olMemFree(p));
  printf("round trip: %s\n", memcmp(in, out, sizeof in) ? "wrong" : "ok");
  Dl_info info;
  if (dladdr((void *)olInit, &info) && info.dli_fname)
    printf("olInit from %s\n", info.dli_fname);
  MUST(olShutDown());
  return 0;
}
