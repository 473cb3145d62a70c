// nested target data with use_device_addr / use_device_ptr / has_device_addr / is_device_ptr, presence checks
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  int dev = 0;
  int arr[16];
  double x = 1.5;
  int *heap = malloc(8 * sizeof(int));
  for (int i = 0; i < 16; i++) arr[i] = i;
  for (int i = 0; i < 8; i++) heap[i] = 100 + i;
#pragma omp target data map(to : arr) map(tofrom : x)
  {
    printf("L1 present arr=%d x=%d heap=%d\n", omp_target_is_present(arr, dev), omp_target_is_present(&x, dev),
           omp_target_is_present(heap, dev));
#pragma omp target data map(tofrom : heap[0 : 8]) map(alloc : arr[4 : 4])
    {
      printf("L2 present heap=%d heap+7=%d heap+8=%d\n", omp_target_is_present(heap, dev),
             omp_target_is_present(heap + 7, dev), omp_target_is_present(heap + 8, dev));
      int *darr = NULL, *dheap = NULL;
      double *dx = NULL;
#pragma omp target data use_device_addr(arr, x) use_device_ptr(heap)
      {
        darr = arr;
        dx = &x;
        dheap = heap;
#pragma omp target has_device_addr(arr, x) is_device_ptr(heap)
        {
          for (int i = 0; i < 8; i++) heap[i] += arr[i + 8];
          x *= 2;
        }
      }
      printf("mapped arr ok=%d x ok=%d heap ok=%d arr+4 ok=%d\n", darr == omp_get_mapped_ptr(arr, dev),
             dx == omp_get_mapped_ptr(&x, dev), dheap == omp_get_mapped_ptr(heap, dev),
             darr + 4 == omp_get_mapped_ptr(arr + 4, dev));
#pragma omp target is_device_ptr(darr, dheap)
      for (int i = 0; i < 8; i++) dheap[i] += darr[i];
#pragma omp target data use_device_addr(arr[4 : 4])
      {
        int *p4 = &arr[4];
#pragma omp target is_device_ptr(p4)
        p4[0] = -4;
      }
#pragma omp target update from(arr[4 : 1])
      printf("arr[4]=%d arr[5]=%d\n", arr[4], arr[5]);
    }
    printf("after L2 heap present=%d\n", omp_target_is_present(heap, dev));
  }
  printf("after L1 arr present=%d\n", omp_target_is_present(arr, dev));
  printf("x=%.1f heap=%d %d %d\n", x, heap[0], heap[3], heap[7]);
  free(heap);
  return 0;
}
