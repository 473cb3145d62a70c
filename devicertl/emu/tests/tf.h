/* A tiny test framework for the host tests: thread-safe CHECKs (callable
 * from emulated GPU threads), cases, death tests in a fork, and the summary
 * line "<test>: N passed, M failed" that CI reads; the exit status is
 * non-zero when anything failed. One translation unit per test program. */
#ifndef EMU_TESTS_TF_H
#define EMU_TESTS_TF_H

#define _GNU_SOURCE
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu.h"

static unsigned long tf_checks;      /* atomic */
static unsigned long tf_failures;    /* atomic: failed checks in this case */
static unsigned long tf_printed;     /* atomic: messages printed in this case */
static int tf_passed, tf_failed, tf_skipped;
static int tf_skipping; /* the current case matches TF_SKIP */
static char tf_case[256];
static const char *tf_prog = "test";

#define TF_MAX_MESSAGES 20

__attribute__((format(printf, 4, 5))) static void tf_fail(const char *file, int line,
                                                          const char *expr, const char *fmt, ...) {
  if (tf_skipping)
    return;
  __atomic_fetch_add(&tf_failures, 1, __ATOMIC_RELAXED);
  if (__atomic_fetch_add(&tf_printed, 1, __ATOMIC_RELAXED) >= TF_MAX_MESSAGES)
    return;
  char msg[512] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
  }
  fprintf(stderr, "  FAILED %s:%d [%s]: %s%s%s\n", file, line, tf_case, expr, fmt ? ": " : "",
          msg);
}

static inline void tf_ok(void) { __atomic_fetch_add(&tf_checks, 1, __ATOMIC_RELAXED); }

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    tf_ok();                                                                                   \
    if (!(cond))                                                                               \
      tf_fail(__FILE__, __LINE__, #cond, NULL);                                                \
  } while (0)
#define CHECK_MSG(cond, ...)                                                                   \
  do {                                                                                         \
    tf_ok();                                                                                   \
    if (!(cond))                                                                               \
      tf_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                         \
  } while (0)
#define CHECK_EQ(a, b)                                                                         \
  do {                                                                                         \
    long long tf_a_ = (long long)(a), tf_b_ = (long long)(b);                                  \
    tf_ok();                                                                                   \
    if (tf_a_ != tf_b_)                                                                        \
      tf_fail(__FILE__, __LINE__, #a " == " #b, "%lld != %lld", tf_a_, tf_b_);                 \
  } while (0)
#define CHECK_NEAR(a, b, tol)                                                                  \
  do {                                                                                         \
    double tf_a_ = (double)(a), tf_b_ = (double)(b);                                           \
    tf_ok();                                                                                   \
    if (!(tf_a_ - tf_b_ <= (tol) && tf_b_ - tf_a_ <= (tol)))                                   \
      tf_fail(__FILE__, __LINE__, #a " ~= " #b, "%.17g vs %.17g", tf_a_, tf_b_);              \
  } while (0)

/* Cases: tf_begin("fmt", ...) ... tf_end(). */
__attribute__((format(printf, 1, 2))) static void tf_begin(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tf_case, sizeof tf_case, fmt, ap);
  va_end(ap);
  __atomic_store_n(&tf_failures, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&tf_printed, 0, __ATOMIC_RELAXED);
  /* TF_SKIP='a|b': cases whose names contain a or b launch nothing and
   * count as skipped (to get past a known hang while it is fixed). */
  tf_skipping = 0;
  const char *skip = getenv("TF_SKIP");
  while (skip && *skip) {
    const char *end = strchr(skip, '|');
    size_t n = end ? (size_t)(end - skip) : strlen(skip);
    if (n && memmem(tf_case, strlen(tf_case), skip, n))
      tf_skipping = 1;
    skip = end ? end + 1 : NULL;
  }
  if (getenv("TF_VERBOSE")) {
    fprintf(stderr, "  ... %s\n", tf_case);
  }
}

static int tf_end(void) {
  if (tf_skipping) {
    tf_skipped++;
    fprintf(stderr, "SKIP %s: %s (TF_SKIP)\n", tf_prog, tf_case);
    tf_skipping = 0;
    return 1;
  }
  unsigned long f = __atomic_load_n(&tf_failures, __ATOMIC_RELAXED);
  if (f) {
    tf_failed++;
    fprintf(stderr, "FAIL %s: %s (%lu failed checks)\n", tf_prog, tf_case, f);
  } else {
    tf_passed++;
  }
  return f == 0;
}

static void tf_init(int argc, char **argv) {
  (void)argc;
  const char *p = strrchr(argv[0], '/');
  tf_prog = p ? p + 1 : argv[0];
  setvbuf(stdout, NULL, _IOLBF, 0);
}

static int tf_summary(void) {
  printf("%s: %d passed, %d failed (%lu checks%s)\n", tf_prog, tf_passed, tf_failed,
         __atomic_load_n(&tf_checks, __ATOMIC_RELAXED), tf_skipped ? ", some skipped" : "");
  if (tf_skipped)
    printf("%s: %d skipped (TF_SKIP)\n", tf_prog, tf_skipped);
  fflush(stdout);
  return tf_failed ? 1 : 0;
}

/* Runs fn(arg) in a child process and expects it to abort (SIGABRT) with
 * `expect` (if not NULL) in what it wrote to stderr. */
__attribute__((unused)) static void tf_expect_abort(void (*fn)(void *), void *arg, const char *expect) {
  int fds[2];
  if (pipe(fds) != 0) {
    tf_fail(__FILE__, __LINE__, "pipe", NULL);
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  static char out[1 << 16];
  size_t n = 0;
  ssize_t r;
  while ((r = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
    n += (size_t)r;
  out[n] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  tf_ok();
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
    tf_fail(__FILE__, __LINE__, "child aborts", "exit status 0x%x; its stderr:\n%s", status, out);
  else if (expect && !strstr(out, expect))
    tf_fail(__FILE__, __LINE__, "abort message", "expected \"%s\" in:\n%s", expect, out);
}

/* A launch that must succeed. */
__attribute__((unused)) static void tf_launch(uint32_t blocks, uint32_t threads, uint32_t warp, uint32_t dyn,
                      emu_kernel_fn k, void *dyn_ptr, void **args) {
  if (tf_skipping)
    return;
  emu_launch_config c = {blocks, threads, warp, dyn};
  int rc = emu_launch(&c, k, dyn_ptr, args);
  tf_ok();
  if (rc != 0)
    tf_fail(__FILE__, __LINE__, "emu_launch", "returned %d", rc);
}

#endif
