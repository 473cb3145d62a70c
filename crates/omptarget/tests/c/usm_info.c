// ENV: LIBOMPTARGET_INFO=-1
// NO-REMOTE: unified shared memory needs host and device to share one address space
// COMPARE-STDERR
// unified_shared_memory: explicit maps of host storage create no map entries (presence, mapped pointer, INFO)
#include <omp.h>
#include <stdio.h>
#pragma omp requires unified_shared_memory
static int x = 1;
int main(void) {
#pragma omp target data map(tofrom : x)
  {
    printf("present=%d mapped=%s\n", omp_target_is_present(&x, 0),
           omp_get_mapped_ptr(&x, 0) == &x ? "host" : omp_get_mapped_ptr(&x, 0) ? "other" : "NULL");
#pragma omp target map(tofrom : x)
    x += 1;
  }
  printf("x=%d\n", x);
  return 0;
}
