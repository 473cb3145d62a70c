// KNOWN-DIFF: INFO: on exit of target data map(tofrom: bp[0:0], big) the bp[0:0] lookup must still find big pending deletion (Mapping exists ... Size=0, DynRefCount=0 (decremented)) and Removing map entry shows Size=0
// ENV: LIBOMPTARGET_INFO=-1
// COMPARE-STDERR
// zero-length sections: on NULL, on mapped storage (inside and at the end), in enter/exit data, with present
#include <stdio.h>
static int arr[10];
static int big[4];
int main(void) {
  int *np = NULL;
  int *mp = arr;
  for (int i = 0; i < 10; i++) arr[i] = i;
#pragma omp target enter data map(to : np[0 : 0])
#pragma omp target exit data map(from : np[0 : 0])
  int got = -1;
#pragma omp target map(np[0 : 0]) map(from : got)
  got = np == NULL;
  printf("null zero-len in kernel is null=%d\n", got);
#pragma omp target enter data map(to : arr)
#pragma omp target map(mp[3 : 0]) map(from : got)
  got = mp[3];
  printf("mp[3] via zero-len=%d\n", got);
#pragma omp target enter data map(alloc : mp[5 : 0])
#pragma omp target exit data map(release : mp[5 : 0])
#pragma omp target map(present, alloc : mp[4 : 0]) map(from : got)
  got = mp[4] + 100;
  printf("present zero-len=%d\n", got);
#pragma omp target exit data map(delete : arr)
  int *bp = big;
#pragma omp target data map(tofrom : bp[0 : 0], big)
  {
#pragma omp target
    big[1] = 42;
  }
  printf("big[1]=%d\n", big[1]);
  return 0;
}
