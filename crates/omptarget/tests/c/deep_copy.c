// array of structs with pointer members, deep-copied by hand with enter/exit data and attach
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct { int n; double *vals; int id; } Node;
int main(void) {
  enum { M = 4 };
  Node *nodes = malloc(M * sizeof(Node));
  for (int i = 0; i < M; i++) {
    nodes[i].n = i + 2;
    nodes[i].id = 100 + i;
    nodes[i].vals = malloc(nodes[i].n * sizeof(double));
    for (int j = 0; j < nodes[i].n; j++) nodes[i].vals[j] = i + j * 0.25;
  }
#pragma omp target enter data map(to : nodes[0 : M])
  for (int i = 0; i < M; i++) {
#pragma omp target enter data map(to : nodes[i].vals[0 : nodes[i].n])
  }
#pragma omp target
  for (int i = 0; i < M; i++)
    for (int j = 0; j < nodes[i].n; j++) nodes[i].vals[j] = nodes[i].vals[j] * 2 + nodes[i].id;
  for (int i = 0; i < M; i++) {
#pragma omp target exit data map(from : nodes[i].vals[0 : nodes[i].n])
  }
  double *saved = nodes[1].vals;
#pragma omp target exit data map(from : nodes[0 : M])
  printf("host pointer restored=%d\n", nodes[1].vals == saved);
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < nodes[i].n; j++) printf("%.2f ", nodes[i].vals[j]);
    printf("| ");
  }
  printf("\n");
  Node single = {3, malloc(3 * sizeof(double)), 7};
  for (int j = 0; j < 3; j++) single.vals[j] = j;
#pragma omp target map(tofrom : single, single.vals[0 : 3])
  {
    single.id += 1;
    for (int j = 0; j < single.n; j++) single.vals[j] += 10;
  }
  printf("single id=%d vals=%.0f %.0f %.0f\n", single.id, single.vals[0], single.vals[1], single.vals[2]);
  double **rows = malloc(3 * sizeof(double *));
  for (int r = 0; r < 3; r++) {
    rows[r] = malloc(2 * sizeof(double));
    rows[r][0] = r;
    rows[r][1] = -r;
  }
#pragma omp target enter data map(to : rows[0 : 3])
  for (int r = 0; r < 3; r++) {
#pragma omp target enter data map(to : rows[r][0 : 2])
  }
#pragma omp target
  for (int r = 0; r < 3; r++) rows[r][1] = rows[r][0] * 100;
  for (int r = 0; r < 3; r++) {
#pragma omp target exit data map(from : rows[r][0 : 2])
  }
#pragma omp target exit data map(release : rows[0 : 3])
  printf("rows %.0f %.0f %.0f present=%d\n", rows[0][1], rows[1][1], rows[2][1], omp_target_is_present(rows, 0));
  return 0;
}
