// omp_target_memcpy_rect in 3-D (h2d, d2d, d2h, host-host), 1-D, and async rect
#include <omp.h>
#include <stdio.h>
#include <string.h>
#define A 4
#define B 5
#define C 6
int main(void) {
  int host = omp_get_initial_device(), dev = 0;
  static int src[A][B][C], dst[A][B][C];
  for (int i = 0; i < A * B * C; i++) ((int *)src)[i] = i;
  memset(dst, 0, sizeof dst);
  int *d0 = omp_target_alloc(sizeof src, dev);
  int *d1 = omp_target_alloc(sizeof src, 1);
  size_t dims[3] = {A, B, C}, vol[3] = {2, 3, 4}, zero[3] = {0, 0, 0};
  size_t soff[3] = {1, 1, 2}, doff[3] = {2, 0, 1};
  omp_target_memset(d0, 0, sizeof src, dev);
  printf("h2d=%d\n", omp_target_memcpy_rect(d0, src, sizeof(int), 3, vol, doff, soff, dims, dims, dev, host));
  printf("d2d=%d\n", omp_target_memcpy_rect(d1, d0, sizeof(int), 3, dims, zero, zero, dims, dims, 1, dev));
  printf("d2h=%d\n", omp_target_memcpy_rect(dst, d1, sizeof(int), 3, dims, zero, zero, dims, dims, host, 1));
  long s = 0;
  int nz = 0;
  for (int i = 0; i < A; i++)
    for (int j = 0; j < B; j++)
      for (int k = 0; k < C; k++)
        if (dst[i][j][k]) {
          nz++;
          s += dst[i][j][k] * (i + 1);
        }
  printf("nonzero=%d weighted=%ld dst[2][0][1]=%d dst[3][2][4]=%d\n", nz, s, dst[2][0][1], dst[3][2][4]);
  int line[10], out[10];
  for (int i = 0; i < 10; i++) line[i] = 100 + i;
  memset(out, 0, sizeof out);
  size_t l_vol[1] = {4}, l_soff[1] = {3}, l_doff[1] = {5}, l_dim[1] = {10};
  printf("1d=%d\n", omp_target_memcpy_rect(out, line, sizeof(int), 1, l_vol, l_doff, l_soff, l_dim, l_dim, host, host));
  printf("out[5..8]=%d %d %d %d out[4]=%d\n", out[5], out[6], out[7], out[8], out[4]);
  static int rsrc[3][4], rdst[3][4];
  for (int i = 0; i < 12; i++) ((int *)rsrc)[i] = i + 1;
  size_t rv[2] = {2, 2}, ro[2] = {1, 1}, rd[2] = {3, 4};
  int *drect = omp_target_alloc(sizeof rsrc, dev);
  omp_target_memset(drect, 0, sizeof rsrc, dev);
  printf("rect async=%d\n",
         omp_target_memcpy_rect_async(drect, rsrc, sizeof(int), 2, rv, ro, ro, rd, rd, dev, host, 0, NULL));
#pragma omp taskwait
  omp_target_memcpy(rdst, drect, sizeof rdst, 0, 0, host, dev);
  for (int i = 0; i < 3; i++) printf("%d %d %d %d | ", rdst[i][0], rdst[i][1], rdst[i][2], rdst[i][3]);
  printf("\n");
  omp_target_free(drect, dev);
  omp_target_free(d0, dev);
  omp_target_free(d1, 1);
  return 0;
}
