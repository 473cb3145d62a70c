/* interop_props.c - OpenMP interop objects on every device of our runtime:
 * standard properties, return codes, the implementation-defined offload
 * table, use/destroy, and ordering of `interop use` with depend/nowait.
 * Prints only deterministic lines (no addresses); ends with OK. */
#include <offload/interop.h>
#include <omp.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define TABLE ((omp_interop_property_t)OMPX_IPR_OFFLOAD_TABLE)

static const char *str_or(const char *s) { return s ? s : "(null)"; }

static char *device_uid(const offload_interop_table_t *t, char *buf, size_t n) {
  buf[0] = 0;
  OL(t->olGetDeviceInfo(t->device, OL_DEVICE_INFO_UID, n, buf));
  return buf;
}

/* Every standard property of a live object, with its return code. */
static void describe(omp_interop_t o, int dev, int targetsync) {
  int rc = 99;
  printf("device %d (%s):", dev, targetsync ? "targetsync" : "target");
  printf(" fr_id=%#lx", (long)omp_get_interop_int(o, omp_ipr_fr_id, &rc));
  CHECK(rc == omp_irc_success);
  printf(" fr_name=%s", str_or(omp_get_interop_str(o, omp_ipr_fr_name, &rc)));
  CHECK(rc == omp_irc_success);
  printf(" vendor=%ld", (long)omp_get_interop_int(o, omp_ipr_vendor, &rc));
  CHECK(rc == omp_irc_success);
  printf(" vendor_name=%s", str_or(omp_get_interop_str(o, omp_ipr_vendor_name, &rc)));
  CHECK(rc == omp_irc_success);
  printf(" device_num=%ld", (long)omp_get_interop_int(o, omp_ipr_device_num, &rc));
  CHECK(rc == omp_irc_success);
  void *platform = omp_get_interop_ptr(o, omp_ipr_platform, &rc);
  CHECK(rc == omp_irc_success && platform);
  void *device = omp_get_interop_ptr(o, omp_ipr_device, &rc);
  CHECK(rc == omp_irc_success && device);
  void *ctx = omp_get_interop_ptr(o, omp_ipr_device_context, &rc);
  printf(" device_context:rc=%d", rc);
  CHECK(rc == omp_irc_no_value && !ctx);
  void *ts = omp_get_interop_ptr(o, omp_ipr_targetsync, &rc);
  printf(" targetsync:rc=%d\n", rc);
  CHECK(targetsync ? (rc == omp_irc_success && ts) : (rc == omp_irc_no_value && !ts));

  const offload_interop_table_t *t = omp_get_interop_ptr(o, TABLE, &rc);
  CHECK(rc == omp_irc_success && t);
  if (!t)
    return;
  CHECK(t->version == OFFLOAD_INTEROP_TABLE_VERSION);
  CHECK(t->size == sizeof(offload_interop_table_t));
  CHECK(OFFLOAD_INTEROP_TABLE_HAS(t, olCalculateOptimalOccupancy));
  CHECK((void *)t->device == device && (void *)t->platform == platform);
  CHECK((void *)t->queue == ts);
  /* The table's device is this OpenMP device: same UID. */
  char uid[256];
  const char *omp_uid = omp_get_uid_from_device(dev);
  CHECK(omp_uid && strcmp(device_uid(t, uid, sizeof uid), omp_uid) == 0);
  ol_platform_handle_t p = NULL;
  OL(t->olGetDeviceInfo(t->device, OL_DEVICE_INFO_PLATFORM, sizeof p, &p));
  CHECK((void *)p == platform);
  if (t->queue) {
    ol_device_handle_t qd = NULL;
    OL(t->olGetQueueInfo(t->queue, OL_QUEUE_INFO_DEVICE, sizeof qd, &qd));
    CHECK(qd == t->device);
  }
}

static void return_codes(omp_interop_t o) {
  int rc = 99;
  /* Wrong type: the code names the property's type. */
  CHECK(omp_get_interop_int(o, omp_ipr_fr_name, &rc) == 0 && rc == omp_irc_type_str);
  CHECK(omp_get_interop_int(o, omp_ipr_device, &rc) == 0 && rc == omp_irc_type_ptr);
  CHECK(omp_get_interop_ptr(o, omp_ipr_fr_id, &rc) == NULL && rc == omp_irc_type_int);
  CHECK(omp_get_interop_str(o, omp_ipr_device_num, &rc) == NULL && rc == omp_irc_type_int);
  CHECK(omp_get_interop_str(o, TABLE, &rc) == NULL && rc == omp_irc_type_ptr);
  CHECK(omp_get_interop_int(o, TABLE, &rc) == 0 && rc == omp_irc_type_ptr);
  /* Out of range: below omp_ipr_first, at or above the implementation count. */
  CHECK(omp_get_num_interop_properties(o) == 1);
  CHECK(omp_get_interop_int(o, (omp_interop_property_t)(omp_ipr_first - 1), &rc) == 0 &&
        rc == omp_irc_out_of_range);
  CHECK(omp_get_interop_ptr(o, (omp_interop_property_t)1, &rc) == NULL &&
        rc == omp_irc_out_of_range);
  CHECK(omp_get_interop_str(o, (omp_interop_property_t)1000, &rc) == NULL &&
        rc == omp_irc_out_of_range);
  /* A NULL rc pointer is allowed. */
  CHECK(omp_get_interop_int(o, omp_ipr_device_num, NULL) >= 0);
  /* omp_interop_none. */
  CHECK(omp_get_interop_int(omp_interop_none, omp_ipr_fr_id, &rc) == 0 && rc == omp_irc_empty);
  CHECK(omp_get_interop_ptr(omp_interop_none, TABLE, &rc) == NULL && rc == omp_irc_empty);
  CHECK(omp_get_num_interop_properties(omp_interop_none) == 0);
  /* Something that is not an interop object of ours. */
  int bogus[16] = {0};
  CHECK(omp_get_interop_ptr((omp_interop_t)bogus, omp_ipr_device, &rc) == NULL &&
        rc == omp_irc_other);
  /* Names, type descriptions, return-code descriptions. */
  for (int p = omp_ipr_first; p <= OMPX_IPR_OFFLOAD_TABLE; p++)
    printf("property %d: %s, %s\n", p,
           str_or(omp_get_interop_name(o, (omp_interop_property_t)p)),
           str_or(omp_get_interop_type_desc(o, (omp_interop_property_t)p)));
  CHECK(omp_get_interop_name(o, (omp_interop_property_t)1) == NULL);
  CHECK(omp_get_interop_name(o, (omp_interop_property_t)(omp_ipr_first - 1)) == NULL);
  CHECK(omp_get_interop_type_desc(o, (omp_interop_property_t)1) == NULL);
  for (int c = omp_irc_other; c <= omp_irc_no_value; c++)
    printf("rc %d: %s\n", c, str_or(omp_get_interop_rc_desc(o, (omp_interop_rc_t)c)));
  CHECK(omp_get_interop_rc_desc(o, (omp_interop_rc_t)42) == NULL);
}

static volatile int queue_flag;
static void slow_set(void *arg) {
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  *(volatile int *)arg = 1;
}

/* `interop use` waits for the targetsync queue; depend orders it after a
 * sibling task; nowait work is complete at the next taskwait. */
static void ordering(void) {
  omp_interop_t o = omp_interop_none;
  #pragma omp interop init(targetsync: o) device(0)
  CHECK(o != omp_interop_none);
  int rc;
  const offload_interop_table_t *t = omp_get_interop_ptr(o, TABLE, &rc);
  if (!t)
    return;
  queue_flag = 0;
  OL(t->olLaunchHostFunction(t->queue, slow_set, (void *)&queue_flag));
  #pragma omp interop use(o)
  CHECK(queue_flag == 1);
  printf("use: waited for the targetsync queue\n");

  int x = 0;
  volatile int task_done = 0;
  queue_flag = 0;
  #pragma omp parallel num_threads(2)
  #pragma omp single
  {
    #pragma omp task depend(out: x) shared(x, task_done)
    {
      struct timespec ts = {0, 30 * 1000 * 1000};
      nanosleep(&ts, NULL);
      OL(t->olLaunchHostFunction(t->queue, slow_set, (void *)&queue_flag));
      x = 1;
      task_done = 1;
    }
    #pragma omp interop use(o) depend(in: x)
    CHECK(task_done == 1 && x == 1 && queue_flag == 1);
  }
  printf("use depend: ordered after the task and its queue work\n");

  queue_flag = 0;
  OL(t->olLaunchHostFunction(t->queue, slow_set, (void *)&queue_flag));
  #pragma omp interop use(o) nowait
  #pragma omp taskwait
  CHECK(queue_flag == 1);
  printf("use nowait: complete at taskwait\n");

  queue_flag = 0;
  OL(t->olLaunchHostFunction(t->queue, slow_set, (void *)&queue_flag));
  ol_queue_handle_t q = t->queue;
  #pragma omp interop destroy(o)
  CHECK(queue_flag == 1);
  CHECK(o == omp_interop_none);
  /* The queue is gone with the object. */
  CHECK(omp_get_interop_ptr(o, omp_ipr_targetsync, &rc) == NULL && rc == omp_irc_empty);
  (void)q;
  printf("destroy: synchronised, object is omp_interop_none\n");
}

int main(void) {
  int n = omp_get_num_devices();
  printf("devices: %d, initial device %d\n", n, omp_get_initial_device());
  CHECK(n > 0);
  /* Every device, the initial device included; targetsync and target. */
  for (int d = 0; d <= n; d++) {
    omp_interop_t s = omp_interop_none, g = omp_interop_none;
    #pragma omp interop init(targetsync: s) device(d)
    #pragma omp interop init(target: g) device(d)
    CHECK(s != omp_interop_none && g != omp_interop_none && s != g);
    if (s)
      describe(s, d, 1);
    if (g)
      describe(g, d, 0);
    #pragma omp interop destroy(s)
    #pragma omp interop destroy(g)
    CHECK(s == omp_interop_none && g == omp_interop_none);
  }
  /* No device clause: the default device. */
  omp_set_default_device(n > 1 ? 1 : 0);
  omp_interop_t o = omp_interop_none;
  #pragma omp interop init(targetsync: o)
  int rc;
  CHECK(omp_get_interop_int(o, omp_ipr_device_num, &rc) == (n > 1 ? 1 : 0));
  return_codes(o);
  #pragma omp interop destroy(o)
  omp_set_default_device(0);
  /* A device that does not exist: omp_interop_none, no abort. */
  omp_interop_t bad = omp_interop_none;
  #pragma omp interop init(targetsync: bad) device(n + 5)
  CHECK(bad == omp_interop_none);
  printf("device %d: omp_interop_none\n", n + 5);
  ordering();
  DONE();
}
