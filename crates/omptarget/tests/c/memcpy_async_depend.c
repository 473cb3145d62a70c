// omp_target_memcpy_async ordered through depend objects with a nowait target task and taskwait
#include <omp.h>
#include <stdio.h>
int main(void) {
  int host = omp_get_initial_device(), dev = 0;
  int buf[8], res[8] = {0};
  for (int i = 0; i < 8; i++) buf[i] = i * i;
  int *db = omp_target_alloc(sizeof buf, dev);
  omp_depend_t dep;
  int token = 0;
#pragma omp depobj(dep) depend(inout : token)
  printf("async h2d=%d\n", omp_target_memcpy_async(db, buf, sizeof buf, 0, 0, dev, host, 1, &dep));
#pragma omp target is_device_ptr(db) depend(inout : token) nowait
  for (int i = 0; i < 8; i++) db[i] += 1;
  printf("async d2h=%d\n", omp_target_memcpy_async(res, db, sizeof res, 0, 0, host, dev, 1, &dep));
#pragma omp taskwait
  printf("res=%d %d %d\n", res[0], res[3], res[7]);
#pragma omp depobj(dep) destroy
  omp_target_free(db, dev);
  return 0;
}
