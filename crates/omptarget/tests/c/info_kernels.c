// ENV: LIBOMPTARGET_INFO=-1
// NO-REMOTE: libomp's team-size warning is printed by the process that runs the kernel (the server)
// COMPARE-STDERR
// INFO output of a non-trivial program: teams loops, reductions, nested data regions, struct members, nowait
#include <stdio.h>
#define N 32
struct Particle { double pos[3]; double vel[3]; int id; };
static struct Particle ps[4];
static double field[N], out[N];
int main(void) {
  for (int i = 0; i < N; i++) field[i] = i * 0.5;
  for (int i = 0; i < 4; i++) {
    ps[i].id = i;
    for (int k = 0; k < 3; k++) { ps[i].pos[k] = i + k; ps[i].vel[k] = 1.0; }
  }
  double total = 0;
#pragma omp target data map(to : field) map(from : out)
  {
#pragma omp target teams distribute parallel for num_teams(2) thread_limit(4)
    for (int i = 0; i < N; i++) out[i] = field[i] * 2;
#pragma omp target teams distribute parallel for reduction(+ : total) map(tofrom : total)
    for (int i = 0; i < N; i++) total += out[i];
#pragma omp target map(tofrom : ps[1].pos, ps[1].id)
    {
      ps[1].pos[0] += 100;
      ps[1].id = 11;
    }
#pragma omp target map(tofrom : ps[0 : 2]) nowait
    ps[0].vel[2] = -1;
#pragma omp taskwait
  }
  printf("out[31]=%.1f total=%.1f pos=%.1f id=%d vel=%.1f\n", out[31], total, ps[1].pos[0], ps[1].id, ps[0].vel[2]);
  return 0;
}
