// omp_target_alloc'd buffers used by is_device_ptr kernels on several devices, associate_ptr + map
#include <omp.h>
#include <stdio.h>
#define N 64
int main(void) {
  int nd = omp_get_num_devices();
  int host = omp_get_initial_device();
  long total = 0;
  for (int d = 0; d < nd; d++) {
    double *buf = omp_target_alloc(N * sizeof(double), d);
#pragma omp target teams distribute parallel for is_device_ptr(buf) device(d)
    for (int i = 0; i < N; i++) buf[i] = i * (d + 1);
    double s = 0;
#pragma omp target is_device_ptr(buf) device(d) map(tofrom : s)
    for (int i = 0; i < N; i++) s += buf[i];
    double h[N];
    omp_target_memcpy(h, buf, sizeof h, 0, 0, host, d);
    printf("dev %d sum=%.0f h[63]=%.0f\n", d, s, h[63]);
    total += (long)s;
    omp_target_free(buf, d);
  }
  printf("total=%ld\n", total);
  int arr[N];
  for (int i = 0; i < N; i++) arr[i] = i;
  int *dv = omp_target_alloc(sizeof arr, 1);
  omp_target_memcpy(dv, arr, sizeof arr, 0, 0, 1, host);
  printf("associate=%d\n", omp_target_associate_ptr(arr, dv, sizeof arr, 0, 1));
#pragma omp target map(tofrom : arr[0 : N]) device(1)
  for (int i = 0; i < N; i++) arr[i] *= 2;
  printf("after associated target arr[5]=%d (not copied back: associated ptrs are never copied)\n", arr[5]);
#pragma omp target update from(arr[0 : N]) device(1)
  printf("after update arr[5]=%d\n", arr[5]);
#pragma omp target map(always, tofrom : arr[0 : N]) device(1)
  arr[6] += 1000;
  printf("always arr[6]=%d\n", arr[6]);
  printf("disassociate=%d\n", omp_target_disassociate_ptr(arr, 1));
  int *off = omp_target_alloc(8 * sizeof(int), 2);
  int part[4] = {7, 8, 9, 10};
  printf("associate offset=%d\n", omp_target_associate_ptr(part, off, sizeof part, 4 * sizeof(int), 2));
#pragma omp target device(2) map(tofrom : part)
  part[0] = part[0] * 100;
#pragma omp target device(2) is_device_ptr(off) map(from : part[1 : 1])
  part[1] = off[4];
  printf("part=%d %d mapped ok=%d\n", part[0], part[1], omp_get_mapped_ptr(part, 2) == (void *)(off + 4));
  omp_target_disassociate_ptr(part, 2);
  omp_target_free(off, 2);
  omp_target_free(dv, 1);
  void *hostmem = omp_target_alloc(16, host);
  printf("host alloc nonnull=%d\n", hostmem != NULL);
  omp_target_free(hostmem, host);
  return 0;
}
