// Declare mappers that map only some members of a struct: the target
// region's argument is the whole struct, which no single mapping holds.
// The kernel must still see the device copies of the mapped members (the
// device address of the mapping that overlaps the struct, offset back to
// the struct's start), so what it writes is what `from` copies back.
#include <stdio.h>

typedef struct {
  double mass;
  int hits;
  int id;
} Probe;

typedef struct {
  double mass;
  int id;
  int hits;
  double energy;
} Cell;

#pragma omp declare mapper(default : Probe p) map(tofrom : p.hits)
#pragma omp declare mapper(default : Cell c) map(tofrom : c.hits, c.energy)

Probe p;
Cell g;

int main(void) {
  p.mass = 1.5;
  p.hits = 0;
  p.id = 7;
  // p.hits stays mapped (reference count 1) around these regions.
#pragma omp target enter data map(alloc : p.hits)
#pragma omp target map(always, from : p)
  { p.hits = 42; }
  printf("probe always from: hits=%d id=%d\n", p.hits, p.id);
#pragma omp target map(from : p)
  { p.hits = 43; }
  printf("probe plain from: hits=%d\n", p.hits);
#pragma omp target map(always, from : p)
  { p.hits += 1; }
  printf("probe always again: hits=%d\n", p.hits);
#pragma omp target exit data map(delete : p.hits)

  // Two members: one mapping spans both, the struct extends past it.
  g.mass = 2.5;
  g.id = 9;
  g.hits = 1;
  g.energy = 0.5;
#pragma omp target enter data map(to : g.hits, g.energy)
#pragma omp target map(always, from : g)
  {
    g.hits *= 3;
    g.energy += 2;
  }
  printf("cell always from: hits=%d energy=%g\n", g.hits, g.energy);
#pragma omp target exit data map(delete : g.hits, g.energy)

  // A local struct mapped only through the mapper, nothing pre-mapped.
  Cell l = {2.0, 3, 5, 0.5};
#pragma omp target map(tofrom : l)
  {
    l.hits *= 2;
    l.energy += 1;
  }
  printf("local: mass=%g id=%d hits=%d energy=%g\n", l.mass, l.id, l.hits,
         l.energy);
  return 0;
}
