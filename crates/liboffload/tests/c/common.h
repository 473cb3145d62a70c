/* common.h - helpers shared by the liboffload C tests. */
#ifndef OL_TEST_COMMON_H
#define OL_TEST_COMMON_H
#include <stdbool.h> /* OffloadAPI.h uses bool without including it */
#include <stddef.h>
#include <OffloadAPI.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures, g_checks;

static const char *errc_name(ol_result_t r) {
  static const char *n[] = {"SUCCESS", "UNKNOWN", "HOST_IO", "INVALID_BINARY", "INVALID_NULL_POINTER",
                            "INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RESOURCES", "INVALID_SIZE",
                            "INVALID_ENUMERATION", "HOST_TOOL_NOT_FOUND", "INVALID_VALUE",
                            "UNIMPLEMENTED", "UNSUPPORTED", "ASSEMBLE_FAILURE", "COMPILE_FAILURE",
                            "LINK_FAILURE", "BACKEND_FAILURE", "UNINITIALIZED", "INVALID_NULL_HANDLE",
                            "INVALID_PLATFORM", "INVALID_DEVICE", "INVALID_QUEUE", "INVALID_EVENT",
                            "SYMBOL_KIND"};
  if (!r) return "SUCCESS";
  return (unsigned)r->Code < sizeof n / sizeof n[0] ? n[r->Code] : "?";
}

#define CHECK(cond)                                                                    \
  do {                                                                                 \
    g_checks++;                                                                        \
    if (!(cond)) {                                                                     \
      g_failures++;                                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);        \
    }                                                                                  \
  } while (0)

/* Expect `call` to return `code` (OL_ERRC_SUCCESS for success). Error details
 * must be a non-empty string. */
#define EXPECT(code, call)                                                             \
  do {                                                                                 \
    g_checks++;                                                                        \
    ol_result_t r_ = (call);                                                           \
    ol_errc_t got_ = r_ ? r_->Code : OL_ERRC_SUCCESS;                                  \
    if (got_ != (code)) {                                                              \
      g_failures++;                                                                    \
      fprintf(stderr, "%s:%d: %s -> %s (%s), expected %s\n", __FILE__, __LINE__, #call, \
              errc_name(r_), r_ && r_->Details ? r_->Details : "", #code);             \
    } else if (r_ && (!r_->Details || !r_->Details[0])) {                              \
      g_failures++;                                                                    \
      fprintf(stderr, "%s:%d: %s: empty error details\n", __FILE__, __LINE__, #call);  \
    }                                                                                  \
  } while (0)

#define OK(call) EXPECT(OL_ERRC_SUCCESS, call)

/* Fail with details if `call` fails; stop the test. */
#define MUST(call)                                                                     \
  do {                                                                                 \
    ol_result_t r_ = (call);                                                           \
    if (r_) {                                                                          \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,         \
              errc_name(r_), r_->Details ? r_->Details : "");                          \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

static int finish(const char *name) {
  printf("%s: %d checks, %d failures\n", name, g_checks, g_failures);
  return g_failures ? 1 : 0;
}

#define MAX_DEVS 64
static ol_device_handle_t g_devs[MAX_DEVS];
static int g_ndevs;
static bool collect_cb(ol_device_handle_t d, void *ud) {
  (void)ud;
  if (g_ndevs < MAX_DEVS) g_devs[g_ndevs++] = d;
  return true;
}
static void collect_devices(void) {
  g_ndevs = 0;
  MUST(olIterateDevices(collect_cb, NULL));
}
static ol_device_type_t dev_type(ol_device_handle_t d) {
  ol_device_type_t t = OL_DEVICE_TYPE_DEFAULT;
  MUST(olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof t, &t));
  return t;
}
/* The HOST-type device (names host memory in olMemcpy). */
static ol_device_handle_t host_device(void) {
  for (int i = 0; i < g_ndevs; i++)
    if (dev_type(g_devs[i]) == OL_DEVICE_TYPE_HOST) return g_devs[i];
  return NULL;
}
/* The first device that is not of type HOST (our CPU devices), or NULL. */
static ol_device_handle_t offload_device(int nth) {
  for (int i = 0; i < g_ndevs; i++)
    if (dev_type(g_devs[i]) != OL_DEVICE_TYPE_HOST && nth-- == 0) return g_devs[i];
  return NULL;
}

static char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) exit(2);
  fclose(f);
  *size = (size_t)n;
  return buf;
}
#endif
