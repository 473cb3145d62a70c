// ENV: LIBOMPTARGET_INFO=-1
// COMPARE-STDERR
// INFO output of target update on sections/members of larger entries and of presence queries
#include <omp.h>
#include <stdio.h>
struct P { int x, y, z; };
int main(void) {
  int a[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  struct P p = {1, 2, 3};
#pragma omp target enter data map(to : a, p)
#pragma omp target
  { a[2] = 20; a[3] = 30; p.y = 200; }
#pragma omp target update from(a[2 : 2])
#pragma omp target update from(p.y)
  a[5] = 50;
#pragma omp target update to(a[5])
  printf("a[2]=%d a[3]=%d p.y=%d\n", a[2], a[3], p.y);
  printf("present a+1=%d mapped ok=%d\n", omp_target_is_present(a + 1, 0), omp_get_mapped_ptr(a + 1, 0) != NULL);
#pragma omp target exit data map(from : a) map(release : p)
  printf("a[5]=%d present=%d\n", a[5], omp_target_is_present(a, 0));
  return 0;
}
