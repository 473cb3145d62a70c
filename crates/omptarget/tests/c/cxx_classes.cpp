// CXX
// std::vector data mapped through pointers, member functions mapping this, lambdas, templates
#include <cstdio>
#include <numeric>
#include <vector>
template <typename T, int N> struct Fixed {
  T v[N];
  T sum() const {
    T s = 0;
    for (int i = 0; i < N; i++) s += v[i];
    return s;
  }
};
template <typename T> T dev_dot(const T *a, const T *b, int n) {
  T s = 0;
#pragma omp target teams distribute parallel for reduction(+ : s) map(to : a[0 : n], b[0 : n])
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
class Grid {
  int n_;
  double *data_;

public:
  explicit Grid(int n) : n_(n), data_(new double[n]) {
    for (int i = 0; i < n; i++) data_[i] = i;
  }
  ~Grid() { delete[] data_; }
  void scale(double f) {
    double *d = data_;
    int n = n_;
#pragma omp target map(tofrom : d[0 : n])
    for (int i = 0; i < n; i++) d[i] *= f;
  }
  void shift_this(double s) {
#pragma omp target map(to : this[0 : 1]) map(tofrom : data_[0 : n_])
    for (int i = 0; i < n_; i++) data_[i] += s;
  }
  double at(int i) const { return data_[i]; }
};
int main() {
  std::vector<int> v(100);
  std::iota(v.begin(), v.end(), 1);
  int *vp = v.data();
  size_t n = v.size();
#pragma omp target teams distribute parallel for map(tofrom : vp[0 : n])
  for (size_t i = 0; i < n; i++) vp[i] = vp[i] * 2 - 1;
  printf("v[0]=%d v[99]=%d sum=%d\n", v[0], v[99], std::accumulate(v.begin(), v.end(), 0));
  std::vector<double> x(50, 0.5), y(50);
  for (int i = 0; i < 50; i++) y[i] = i;
  printf("dot<double>=%.2f dot<int>=%d\n", dev_dot(x.data(), y.data(), 50), dev_dot(v.data(), v.data(), 10));
  Fixed<long, 6> f{{1, 2, 3, 4, 5, 6}};
  long fs = 0;
#pragma omp target map(to : f) map(from : fs)
  fs = f.sum();
  printf("fixed sum=%ld\n", fs);
  int k = 7;
  auto add_k = [k](int q) { return q + k; };
  int out[4] = {0};
#pragma omp target map(from : out) firstprivate(add_k)
  for (int i = 0; i < 4; i++) out[i] = add_k(i * 10);
  printf("lambda out=%d %d %d %d\n", out[0], out[1], out[2], out[3]);
  Grid g(8);
  g.scale(3.0);
  g.shift_this(0.5);
  printf("grid %.1f %.1f\n", g.at(1), g.at(7));
  std::vector<std::vector<float>> rows(3, std::vector<float>(4, 1.0f));
  for (int r = 0; r < 3; r++) {
    float *rp = rows[r].data();
#pragma omp target enter data map(to : rp[0 : 4])
#pragma omp target map(alloc : rp[0 : 4]) firstprivate(r)
    for (int i = 0; i < 4; i++) rp[i] += r * 10 + i;
#pragma omp target exit data map(from : rp[0 : 4])
  }
  printf("rows %.0f %.0f %.0f\n", rows[0][3], rows[1][0], rows[2][2]);
  return 0;
}
