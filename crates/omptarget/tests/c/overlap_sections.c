// ENV: LIBOMPTARGET_INFO=-1
// COMPARE-STDERR
// enter/exit data with delete/release on overlapping and contained sections, always from, hold
#include <omp.h>
#include <stdio.h>
void __tgt_set_info_flag(unsigned);
/* presence queries print INFO lines of their own; keep them out of this comparison */
static int present(void *p) {
  __tgt_set_info_flag(0);
  int r = omp_target_is_present(p, 0);
  __tgt_set_info_flag(~0u);
  return r;
}
static int buf[32];
static double other[8];
int main(void) {
  for (int i = 0; i < 32; i++) buf[i] = i;
#pragma omp target enter data map(to : buf[4 : 16])
#pragma omp target enter data map(to : buf[8 : 4])
#pragma omp target enter data map(alloc : buf[4 : 16])
  printf("present 4=%d 19=%d 20=%d 3=%d\n", present(&buf[4]), present(&buf[19]),
         present(&buf[20]), present(&buf[3]));
#pragma omp target map(alloc : buf[10 : 2])
  { buf[10] = -10; buf[11] = -11; }
#pragma omp target exit data map(release : buf[8 : 4])
#pragma omp target exit data map(always, from : buf[10 : 1])
  printf("buf[10]=%d buf[11]=%d still=%d\n", buf[10], buf[11], present(&buf[10]));
#pragma omp target exit data map(from : buf[4 : 16])
  printf("buf[11] after last from=%d still=%d\n", buf[11], present(&buf[10]));
#pragma omp target exit data map(delete : buf[12 : 2])
  printf("after delete of subsection present=%d\n", present(&buf[4]));
#pragma omp target enter data map(to : other)
#pragma omp target data map(ompx_hold, alloc : other)
  {
#pragma omp target exit data map(delete : other)
    printf("held present=%d\n", present(other));
  }
  printf("after hold present=%d\n", present(other));
#pragma omp target exit data map(delete : buf[0 : 32])
  printf("final present=%d\n", present(&buf[5]));
  return 0;
}
