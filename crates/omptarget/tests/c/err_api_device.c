// ARGS: 1 2 3 4 5 6 7 8 9 10 11 12 13
// ENV-VARIANTS: OMP_TARGET_OFFLOAD=DEFAULT | OMP_TARGET_OFFLOAD=DISABLED
// device-memory API routines called with out-of-range / negative device numbers
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int c = argc > 1 ? atoi(argv[1]) : 0;
  int host = omp_get_initial_device();
  static int a[8], b[8];
  int bad = 9, neg = -5;
  printf("case %d start\n", c);
  fflush(stdout);
  size_t vol[1] = {2}, off[1] = {0}, dim[1] = {8};
  switch (c) {
  case 1: printf("alloc null=%d\n", omp_target_alloc(16, bad) == NULL); break;
  case 2: printf("alloc neg null=%d\n", omp_target_alloc(16, neg) == NULL); break;
  case 3: printf("memcpy=%d\n", omp_target_memcpy(a, b, 4, 0, 0, bad, host)); break;
  case 4: printf("memcpy src=%d\n", omp_target_memcpy(a, b, 4, 0, 0, host, bad)); break;
  case 5: printf("is_present=%d\n", omp_target_is_present(a, bad)); break;
  case 6: printf("memset null=%d\n", omp_target_memset(a, 0, 4, bad) == NULL); break;
  case 7: printf("associate=%d\n", omp_target_associate_ptr(a, b, 4, 0, bad)); break;
  case 8: printf("disassociate=%d\n", omp_target_disassociate_ptr(a, bad)); break;
  case 9: printf("mapped null=%d\n", omp_get_mapped_ptr(a, bad) == NULL); break;
  case 10: printf("accessible=%d\n", omp_target_is_accessible(a, 4, bad)); break;
  case 11:
    printf("rect=%d\n", omp_target_memcpy_rect(a, b, sizeof(int), 1, vol, off, off, dim, dim, bad, host));
    break;
  case 12: omp_target_free(a, bad); printf("free returned\n"); break;
  case 13: printf("memcpy_async=%d\n", omp_target_memcpy_async(a, b, 4, 0, 0, host, bad, 0, NULL)); break;
  }
#pragma omp taskwait
  printf("case %d done\n", c);
  return 0;
}
