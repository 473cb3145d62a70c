// COMPARE-STDERR
// ompx_dump_mapping_tables writes to stdout, like LLVM's, through C's
// stdout stream: the lines keep their place among the program's own
// buffered output (nothing is flushed in between).
#include <stdio.h>
void ompx_dump_mapping_tables(void);
int main(void) {
  int a[4] = {1, 2, 3, 4};
  printf("before\n");
  ompx_dump_mapping_tables();
#pragma omp target enter data map(to : a)
  printf("mapped\n");
  ompx_dump_mapping_tables();
#pragma omp target exit data map(release : a)
  printf("released\n");
  ompx_dump_mapping_tables();
  printf("after\n");
  return 0;
}
