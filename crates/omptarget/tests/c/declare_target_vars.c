// declare target variables with initialisers, to/link clauses, target update, always maps
#include <omp.h>
#include <stdio.h>
int counter = 10;
double table[6] = {0.5, 1.5, 2.5, 3.5, 4.5, 5.5};
struct Cfg { int n; float scale; char tag[8]; } cfg = {3, 2.0f, "cfg"};
#pragma omp declare target to(counter, table, cfg)
int linked[5] = {1, 1, 2, 3, 5};
long lscalar = 77;
#pragma omp declare target link(linked, lscalar)
#pragma omp declare target
static int hidden = 123;
int bump(int v) { return v + hidden + counter; }
#pragma omp end declare target
int main(void) {
  int r = 0;
#pragma omp target map(from : r)
  r = bump(1);
  printf("bump=%d\n", r);
  counter = 1000;
#pragma omp target map(from : r)
  r = counter;
  printf("device counter without update=%d\n", r);
#pragma omp target map(always, to : counter) map(from : r)
  r = counter;
  printf("device counter after always-to=%d\n", r);
  double t = 0;
#pragma omp target map(tofrom : t)
  for (int i = 0; i < 6; i++) t += table[i] * cfg.scale;
  printf("t=%.1f tag=%s\n", t, cfg.tag);
#pragma omp target
  {
    cfg.n = 9;
    cfg.tag[0] = 'X';
    table[5] = -1;
  }
  printf("host before update n=%d tag=%s table5=%.1f\n", cfg.n, cfg.tag, table[5]);
#pragma omp target update from(cfg, table[4 : 2])
  printf("host after update n=%d tag=%s table5=%.1f\n", cfg.n, cfg.tag, table[5]);
  cfg.scale = 10;
#pragma omp target update to(cfg.scale)
#pragma omp target map(from : t)
  t = cfg.scale;
  printf("scale=%.1f\n", t);
  long s = 0;
#pragma omp target map(to : linked) map(tofrom : lscalar, s)
  {
    for (int i = 0; i < 5; i++) s += linked[i];
    lscalar += s;
  }
  printf("linked sum=%ld lscalar=%ld\n", s, lscalar);
#pragma omp target enter data map(to : linked[1 : 3])
  linked[2] = 50;
#pragma omp target update to(linked[2 : 1])
#pragma omp target map(from : s)
  s = linked[1] + linked[2] + linked[3];
#pragma omp target exit data map(release : linked[1 : 3])
  printf("linked partial=%ld present after=%d\n", s, omp_target_is_present(&linked[2], 0));
  counter = 5;
#pragma omp target map(always, tofrom : counter)
  counter *= 3;
  printf("counter=%d present=%d\n", counter, omp_target_is_present(&counter, 0));
  return 0;
}
