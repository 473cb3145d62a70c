// the shared library of indirect_shared.c: declare target indirect functions
#pragma omp begin declare target indirect
int lib_twice(int x) { return 2 * x; }
int lib_square(int x) { return x * x; }
#pragma omp end declare target
typedef int (*fn_t)(int);
fn_t lib_pick(int i) { return i ? lib_square : lib_twice; }
int lib_apply(int i, int v) {
  fn_t f = lib_pick(i);
  int r = 0;
#pragma omp target map(from : r)
  r = f(v);
  return r;
}
