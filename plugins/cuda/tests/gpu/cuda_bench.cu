// The CUDA C baselines of omp_bench.c, built with nvcc on the GPU machine
// by scripts/gpu-tests.sh (`nvcc -O3 -arch=sm_XX cuda_bench.cu`):
//
//   cuda_bench   prints `bench triad_GBps cuda X` and `bench reduce_GBps cuda X`
//
// triad: a = b + q * c over 2^27 doubles, one thread an element, 256-thread
// blocks, best of 20; reduce: the sum of 2^27 doubles in two passes (blocks
// of 256 threads each add a grid-stride slice in shared memory and write a
// partial sum; one block adds the partials), best of 20. Results checked.
//
// NOT RUN YET: written without a GPU or nvcc at hand.
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                               \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "cuda_bench: %s: %s\n", #x, cudaGetErrorString(e_));      \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static const long ELEMS = 1L << 27;
static const int REPS = 20;
static const int THREADS = 256;
static const int PARTIALS = 1024;

__global__ void init(double *a, double *b, double *c, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) {
    a[i] = 0.0;
    b[i] = 1.0;
    c[i] = 2.0;
  }
}

__global__ void triad(double *a, const double *b, const double *c, double q, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n)
    a[i] = b[i] + q * c[i];
}

__global__ void partial_sums(const double *x, long n, double *partial) {
  __shared__ double s[THREADS];
  double acc = 0;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    acc += x[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step)
      s[threadIdx.x] += s[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    partial[blockIdx.x] = s[0];
}

int main() {
  double *a, *b, *c, *partial, *total;
  CHECK(cudaMalloc(&a, ELEMS * sizeof(double)));
  CHECK(cudaMalloc(&b, ELEMS * sizeof(double)));
  CHECK(cudaMalloc(&c, ELEMS * sizeof(double)));
  CHECK(cudaMalloc(&partial, PARTIALS * sizeof(double)));
  CHECK(cudaMalloc(&total, sizeof(double)));
  long blocks = (ELEMS + THREADS - 1) / THREADS;
  init<<<blocks, THREADS>>>(a, b, c, ELEMS);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  float best = 1e30f, ms;
  for (int r = 0; r < REPS; r++) {
    CHECK(cudaEventRecord(t0));
    triad<<<blocks, THREADS>>>(a, b, c, 3.0, ELEMS);
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    best = ms < best ? ms : best;
  }
  double ends[2];
  CHECK(cudaMemcpy(&ends[0], a, sizeof(double), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&ends[1], a + ELEMS - 1, sizeof(double), cudaMemcpyDeviceToHost));
  if (ends[0] != 7.0 || ends[1] != 7.0) {
    fprintf(stderr, "cuda_bench: triad gave %g and %g, not 7\n", ends[0], ends[1]);
    return 1;
  }
  printf("bench triad_GBps cuda %.1f\n", 3.0 * sizeof(double) * ELEMS / (best * 1e-3) / 1e9);
  best = 1e30f;
  for (int r = 0; r < REPS; r++) {
    CHECK(cudaEventRecord(t0));
    partial_sums<<<PARTIALS, THREADS>>>(b, ELEMS, partial);
    partial_sums<<<1, THREADS>>>(partial, PARTIALS, total);
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    best = ms < best ? ms : best;
    double sum;
    CHECK(cudaMemcpy(&sum, total, sizeof(double), cudaMemcpyDeviceToHost));
    if (sum != (double)ELEMS) {
      fprintf(stderr, "cuda_bench: reduction gave %.1f, not %ld\n", sum, ELEMS);
      return 1;
    }
  }
  printf("bench reduce_GBps cuda %.1f\n", (double)sizeof(double) * ELEMS / (best * 1e-3) / 1e9);
  return 0;
}
