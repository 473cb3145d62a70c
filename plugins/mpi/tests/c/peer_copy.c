// Target regions on every serving rank's device, then copies between the
// devices of two ranks (omp_target_memcpy), checked byte for byte. The
// serving ranks' devices come after the local ones: the last two are theirs.
// Run: mpirun -np 1 ./peer_copy : -np 2 offload serve --mpi
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  int nd = omp_get_num_devices();
  printf("devices: %d\n", nd);
  for (int d = 0; d < nd; d++) {
    long sum = 0;
    int a[1000];
    for (int i = 0; i < 1000; i++) a[i] = i;
#pragma omp target map(tofrom : sum) map(to : a) device(d)
    for (int i = 0; i < 1000; i++) sum += a[i];
    printf("device %d: sum %ld\n", d, sum);
  }
  if (nd < 2)
    return 1;
  int host = omp_get_initial_device();
  int a = nd - 2, b = nd - 1;
  // A small and a large copy (the large one in raw MPI messages).
  size_t sizes[] = {4096, 3 << 20};
  for (int k = 0; k < 2; k++) {
    size_t sz = sizes[k];
    unsigned char *h = malloc(sz), *back = malloc(sz);
    for (size_t i = 0; i < sz; i++)
      h[i] = (unsigned char)(i * 7 + k);
    void *p0 = omp_target_alloc(sz, a), *p1 = omp_target_alloc(sz, b);
    omp_target_memcpy(p0, h, sz, 0, 0, a, host);
    if (omp_target_memcpy(p1, p0, sz, 0, 0, b, a)) {
      printf("copy failed\n");
      return 1;
    }
    // And back at an offset, the other way.
    memset(back, 0, sz);
    omp_target_memcpy(p0, p1, sz / 2, 0, sz / 2, a, b);
    omp_target_memcpy(back, p0, sz, 0, 0, host, a);
    int ok = memcmp(back, h + sz / 2, sz / 2) == 0 &&
             memcmp(back + sz / 2, h + sz / 2, sz / 2) == 0;
    printf("rank-to-rank copies of %zu bytes: %s\n", sz, ok ? "ok" : "BAD");
    omp_target_free(p0, a);
    omp_target_free(p1, b);
    free(h);
    free(back);
  }
  return 0;
}
