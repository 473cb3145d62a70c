// CXX
// OURS-ONLY: LLVM 22 returns the device address off by the reference member's offset in the class (it applies the base-to-begin offset of a PTR_AND_OBJ entry whose base is `this`)
// EXPECT: ref ok=1 arr ok=1
// EXPECT: written through the device addresses: 42 99
// use_device_addr of class members that are references yields the device
// address of the referenced objects.
#include <cstdio>
#include <omp.h>
struct Holder {
  long pad[3];
  int &ref;
  double (&arr)[4];
  Holder(int &r, double (&a)[4]) : ref(r), arr(a) {}
  void check(int dev) {
    int *dref = nullptr;
    double *darr = nullptr;
#pragma omp target data map(tofrom : ref, arr) use_device_addr(ref, arr)
    {
      dref = &ref;
      darr = &arr[0];
    }
    printf("ref ok=%d arr ok=%d\n",
           dref == (int *)omp_get_mapped_ptr(&ref, dev),
           darr == (double *)omp_get_mapped_ptr(&arr[0], dev));
#pragma omp target is_device_ptr(dref, darr)
    {
      *dref = 42;
      darr[2] = 99;
    }
#pragma omp target update from(ref, arr)
    printf("written through the device addresses: %d %g\n", ref, arr[2]);
  }
};
int main() {
  int x = 5;
  double a[4] = {1, 2, 3, 4};
  Holder h(x, a);
#pragma omp target enter data map(to : x, a)
  h.check(omp_get_default_device());
#pragma omp target exit data map(release : x, a)
  return 0;
}
