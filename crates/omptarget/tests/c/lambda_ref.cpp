// CXX
// lambdas capturing by reference used inside target regions (captured pointers re-targeted to device copies)
#include <cstdio>
int main() {
  int acc = 0;
  auto add = [&acc](int q) { acc += q; };
#pragma omp target map(tofrom : acc)
  for (int i = 1; i <= 4; i++) add(i);
  printf("acc=%d\n", acc);
  double arr[3] = {1, 2, 3};
  int scale = 10;
  auto scale_all = [&arr, scale]() {
    for (int i = 0; i < 3; i++) arr[i] *= scale;
  };
#pragma omp target map(tofrom : arr)
  scale_all();
  printf("arr=%.0f %.0f %.0f\n", arr[0], arr[1], arr[2]);
  return 0;
}
