// firstprivate of large and small structs, arrays and pointers; private copies must not leak back
#include <stdio.h>
#include <string.h>
typedef struct { double m[200]; int tag; } Big; /* > 1024 bytes: separate allocation */
typedef struct { char c; short s; int i; double d; } Small;
int main(void) {
  Big big;
  for (int i = 0; i < 200; i++) big.m[i] = i;
  big.tag = 5;
  Small sm = {'a', 2, 3, 4.5};
  int arr[300];
  for (int i = 0; i < 300; i++) arr[i] = i;
  int *ptr = arr + 10;
  double out[4] = {0};
#pragma omp target firstprivate(big, sm, arr, ptr) map(from : out)
  {
    double s = 0;
    for (int i = 0; i < 200; i++) s += big.m[i];
    big.tag += 100;
    sm.i *= 10;
    arr[0] = -1;
    out[0] = s + big.tag;
    out[1] = sm.c + sm.s + sm.i + sm.d;
    out[2] = arr[299] + arr[0];
    out[3] = (double)(ptr == NULL);
    ptr = NULL;
  }
  printf("out=%.1f %.1f %.1f %.1f\n", out[0], out[1], out[2], out[3]);
  printf("host unchanged: tag=%d sm.i=%d arr0=%d ptr_ok=%d\n", big.tag, sm.i, arr[0], ptr == arr + 10);
  double acc = 0;
#pragma omp target teams distribute parallel for firstprivate(big) reduction(+ : acc)
  for (int i = 0; i < 200; i++) acc += big.m[i] * big.tag;
  printf("acc=%.1f\n", acc);
  char msg[2000];
  memset(msg, 'z', sizeof msg);
  strcpy(msg, "hello");
  int len = 0;
#pragma omp target firstprivate(msg) map(from : len)
  {
    msg[1] = 'E';
    len = (int)strlen(msg) * 1000 + msg[1] + (msg[1999] == 'z');
  }
  printf("len=%d host msg=%s\n", len, msg);
  Small many[3] = {{'x', 1, 1, 1.0}, {'y', 2, 2, 2.0}, {'z', 3, 3, 3.0}};
  double s3 = 0;
#pragma omp target firstprivate(many, sm) map(tofrom : s3)
  for (int i = 0; i < 3; i++) s3 += many[i].d * many[i].s + sm.d;
  printf("s3=%.1f\n", s3);
  return 0;
}
