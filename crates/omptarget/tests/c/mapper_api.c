// the custom-mapper entry points (__tgt_mapper_num_components,
// __tgt_push_mapper_component) called the way clang-22's generated mapper
// functions call them: two nested mappers sharing one handle, MEMBER_OF
// fields computed from the number of components pushed so far, map-type
// decay by the type the mapper is called with
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  int n;
  double *p;
} V;
typedef struct {
  V a;
  int tag;
  V b;
} W;

int64_t __tgt_mapper_num_components(void *handle);
void __tgt_push_mapper_component(void *handle, void *base, void *begin,
                                 int64_t size, int64_t type, void *name);
typedef void data_fn(void *loc, int64_t dev, int32_t n, void **base,
                     void **begin, int64_t *size, int64_t *type, void **names,
                     void **mappers);
data_fn __tgt_target_data_begin_mapper, __tgt_target_data_end_mapper,
    __tgt_target_data_update_mapper;

#define TO 0x1
#define FROM 0x2
#define DELETE 0x8
#define PTR_AND_OBJ 0x10
#define IMPLICIT 0x200
#define MEMBER_OF(i) ((int64_t)((uint64_t)(i) << 48))

static int64_t seen[8];
static int nseen;

/* Map-type decay (OpenMP 5.0 1.2.6) as clang's mapper code does it: a
   member keeps its to/from bits only where the caller's type has them. */
static int64_t decay(int64_t member, int64_t caller) {
  return (member & ~(int64_t)(TO | FROM)) | (member & caller & (TO | FROM));
}

/* declare mapper(V v) map(v, v.p[0 : v.n]) */
static void v_mapper(void *h, void *base, void *begin, int64_t size,
                     int64_t type, void *name) {
  V *v = (V *)begin;
  int64_t count = size / (int64_t)sizeof(V);
  if ((size > (int64_t)sizeof(V) ||
       (base != begin && (type & PTR_AND_OBJ))) &&
      !(type & DELETE))
    __tgt_push_mapper_component(h, base, begin, size,
                                (type & ~(int64_t)0x20C) | IMPLICIT, name);
  for (int64_t i = 0; i < count; i++) {
    int64_t prev = __tgt_mapper_num_components(h);
    seen[nseen++] = prev;
    __tgt_push_mapper_component(h, &v[i], &v[i], sizeof(V), MEMBER_OF(prev),
                                NULL);
    __tgt_push_mapper_component(h, &v[i], &v[i], sizeof(V),
                                decay(MEMBER_OF(prev + 1) | TO | FROM, type),
                                NULL);
    __tgt_push_mapper_component(
        h, &v[i].p, v[i].p, v[i].n * (int64_t)sizeof(double),
        decay(MEMBER_OF(prev + 1) | PTR_AND_OBJ | TO | FROM, type), NULL);
  }
}

/* declare mapper(W w) map(w.a, w.tag, w.b): V's mapper runs for a and b */
static void w_mapper(void *h, void *base, void *begin, int64_t size,
                     int64_t type, void *name) {
  (void)base, (void)size, (void)name;
  W *w = (W *)begin;
  int64_t prev = __tgt_mapper_num_components(h);
  seen[nseen++] = prev;
  __tgt_push_mapper_component(h, w, w, sizeof(W), MEMBER_OF(prev), NULL);
  int64_t m = decay(MEMBER_OF(prev + 1) | TO | FROM, type);
  v_mapper(h, w, &w->a, sizeof(V), m, NULL);
  __tgt_push_mapper_component(h, w, &w->tag, sizeof(int), m, NULL);
  v_mapper(h, w, &w->b, sizeof(V), m, NULL);
}

static void run(data_fn *f, W *w, int64_t type) {
  void *base[1] = {w}, *begin[1] = {w}, *mappers[1] = {(void *)w_mapper};
  int64_t size[1] = {sizeof(W)}, types[1] = {type};
  nseen = 0;
  f(NULL, omp_get_default_device(), 1, base, begin, size, types, NULL,
    mappers);
  printf("components before each mapper's entries:");
  for (int i = 0; i < nseen; i++)
    printf(" %lld", (long long)seen[i]);
  printf("\n");
}

int main(void) {
  int dev = omp_get_default_device();
  W w = {{4, malloc(4 * sizeof(double))}, 5, {2, malloc(2 * sizeof(double))}};
  for (int i = 0; i < 4; i++)
    w.a.p[i] = i;
  for (int i = 0; i < 2; i++)
    w.b.p[i] = 10 + i;

  run(__tgt_target_data_begin_mapper, &w, TO);
  printf("present: w=%d a.p=%d b.p=%d\n", omp_target_is_present(&w, dev),
         omp_target_is_present(w.a.p, dev), omp_target_is_present(w.b.p, dev));

  // The device struct's pointers were attached by the runtime.
#pragma omp target map(alloc : w)
  {
    for (int i = 0; i < w.a.n; i++)
      w.a.p[i] *= 2;
    for (int i = 0; i < w.b.n; i++)
      w.b.p[i] += 1;
    w.tag = 9;
  }
  printf("host still: tag=%d a=%g b=%g\n", w.tag, w.a.p[3], w.b.p[1]);

  run(__tgt_target_data_update_mapper, &w, FROM);
  printf("after update from: tag=%d a=%g %g b=%g %g\n", w.tag, w.a.p[0],
         w.a.p[3], w.b.p[0], w.b.p[1]);

  w.a.p[0] = 100;
  run(__tgt_target_data_end_mapper, &w, FROM);
  printf("after exit from: tag=%d a0=%g present a.p=%d b.p=%d\n", w.tag,
         w.a.p[0], omp_target_is_present(w.a.p, dev),
         omp_target_is_present(w.b.p, dev));
  free(w.a.p);
  free(w.b.p);
  return 0;
}
