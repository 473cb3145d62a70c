// ENV: LIBOMPTARGET_INFO=-1
// COMPARE-STDERR
// if() clauses on target, target data, enter/exit data and update, evaluated at run time
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static int v[6] = {1, 2, 3, 4, 5, 6};
int main(int argc, char **argv) {
  (void)argv;
  int yes = argc > 0, no = argc < 0;
  int where = -1;
#pragma omp target if (no) map(from : where)
  where = omp_is_initial_device();
  printf("if(false) on host=%d\n", where);
#pragma omp target if (target : yes) map(from : where)
  where = omp_is_initial_device();
  printf("if(true) on host=%d\n", where);
#pragma omp target data map(tofrom : v) if (no)
  {
#pragma omp target map(tofrom : v[0 : 2])
    v[0] += 10;
  }
  printf("v0=%d\n", v[0]);
#pragma omp target enter data map(to : v) if (yes)
#pragma omp target enter data map(to : v) if (no)
  v[1] = 20;
#pragma omp target update to(v[1 : 1]) if (no)
#pragma omp target
  v[2] = v[1];
#pragma omp target exit data map(delete : v) if (no)
#pragma omp target exit data map(from : v) if (yes)
  printf("v=%d %d %d present=%d\n", v[0], v[1], v[2], omp_target_is_present(v, 0));
  int r = 0;
#pragma omp target teams distribute parallel for if (no) reduction(+ : r)
  for (int i = 0; i < 10; i++) r += i;
  printf("r=%d\n", r);
  return 0;
}
