/* check.h - tiny self-checking helpers for the interop tests. */
#ifndef INTEROP_CHECK_H
#define INTEROP_CHECK_H
#include <stdio.h>
#include <stdlib.h>
static int failures;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                   \
      failures++;                                                              \
    }                                                                          \
  } while (0)
/* An ol* call that must succeed. */
#define OL(call)                                                               \
  do {                                                                         \
    ol_result_t r_ = (call);                                                   \
    if (r_) {                                                                  \
      printf("FAIL %s:%d: %s -> %d %s\n", __FILE__, __LINE__, #call, r_->Code, \
             r_->Details ? r_->Details : "");                                  \
      failures++;                                                              \
    }                                                                          \
  } while (0)
#define DONE()                                                                 \
  do {                                                                         \
    printf("%s\n", failures ? "FAILED" : "OK");                                \
    return failures != 0;                                                      \
  } while (0)
#endif
