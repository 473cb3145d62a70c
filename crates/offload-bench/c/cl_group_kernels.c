/* cl_group_kernels.c - the kernels of ol_group_kernels.c written in OpenCL C,
 * on the first OpenCL CPU device (PoCL's `cpu` driver on Debian:
 * pocl-opencl-icd; build with ocl-icd-opencl-dev: cc -O2 cl_group_kernels.c
 * -lOpenCL). Same sizes, same measures (best of ROUNDS, each an enqueue +
 * clFinish), so the two print side by side.
 * Usage: cl_group_kernels [ROUNDS [ONLY]] (ONLY: as for ol_group_kernels) */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *only;
static int want(const char *name) { return !only || strstr(name, only); }

static const char *SRC =
    "kernel void write_global_id(global uint *out) { out[get_global_id(0)] = get_global_id(0); }\n"
    "kernel void saxpy(float a, global const float *x, global float *y, uint n) {\n"
    "  size_t i = get_global_id(0); if (i < n) y[i] = a * x[i] + y[i]; }\n"
    "kernel void reduce_dynamic(global uint *out, local uint *mem) {\n"
    "  uint l = get_local_id(0), n = get_local_size(0);\n"
    "  mem[l] = 2; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (uint i = n / 2; i > 0; i >>= 1) { if (l < i) mem[l] += mem[l + i]; barrier(CLK_LOCAL_MEM_FENCE); }\n"
    "  if (l == 0) out[get_group_id(0)] = mem[0]; }\n"
    "#define TILE 16\n"
    "kernel void matmul_tiled(global const float *a, global const float *b, global float *c, uint n) {\n"
    "  local float ta[TILE][TILE], tb[TILE][TILE];\n"
    "  uint tx = get_local_id(0), ty = get_local_id(1);\n"
    "  uint col = get_group_id(0) * TILE + tx, row = get_group_id(1) * TILE + ty;\n"
    "  float acc = 0;\n"
    "  for (uint k0 = 0; k0 < n; k0 += TILE) {\n"
    "    ta[ty][tx] = a[row * n + k0 + tx]; tb[ty][tx] = b[(k0 + ty) * n + col];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    for (uint k = 0; k < TILE; k++) acc += ta[ty][k] * tb[k][tx];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  }\n"
    "  c[row * n + col] = acc; }\n";

#define CHK(x)                                                  \
  do {                                                          \
    cl_int e_ = (x);                                            \
    if (e_ != CL_SUCCESS) {                                     \
      fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, e_); \
      exit(1);                                                  \
    }                                                           \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static cl_command_queue q;
static double best(int rounds, cl_kernel k, cl_uint dims, const size_t *global, const size_t *local) {
  double b = 1e30;
  for (int r = 0; r < rounds; r++) {
    double t = now_us();
    CHK(clEnqueueNDRangeKernel(q, k, dims, NULL, global, local, 0, NULL, NULL));
    CHK(clFinish(q));
    t = (now_us() - t) / 1e3;
    if (t < b) b = t;
  }
  return b;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  only = argc > 2 ? argv[2] : NULL;
  cl_platform_id plats[8];
  cl_uint np = 0;
  CHK(clGetPlatformIDs(8, plats, &np));
  cl_device_id dev = NULL;
  for (cl_uint i = 0; i < np && !dev; i++)
    if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_CPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
  if (!dev) return 3;
  char name[256];
  CHK(clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL));
  printf("# OpenCL device: %s\n", name);
  cl_int e;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
  CHK(e);
  q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &e);
  CHK(e);
  cl_program p = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e);
  CHK(e);
  CHK(clBuildProgram(p, 1, &dev, "-cl-std=CL1.2", NULL, NULL));
  cl_kernel mm = clCreateKernel(p, "matmul_tiled", &e), red = clCreateKernel(p, "reduce_dynamic", &e),
            plain = clCreateKernel(p, "write_global_id", &e), sx = clCreateKernel(p, "saxpy", &e);
  CHK(e);

  enum { N = 1024 };
  cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * N * 4, NULL, &e),
         b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * N * 4, NULL, &e),
         c = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * N * 4, NULL, &e);
  CHK(e);
  float *init = malloc(N * N * 4);
  for (int i = 0; i < N * N; i++) init[i] = (float)(i % 3);
  CHK(clEnqueueWriteBuffer(q, a, CL_TRUE, 0, N * N * 4, init, 0, NULL, NULL));
  CHK(clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N * N * 4, init, 0, NULL, NULL));
  cl_uint n = N;
  CHK(clSetKernelArg(mm, 0, sizeof a, &a));
  CHK(clSetKernelArg(mm, 1, sizeof b, &b));
  CHK(clSetKernelArg(mm, 2, sizeof c, &c));
  CHK(clSetKernelArg(mm, 3, sizeof n, &n));
  size_t mg[2] = {N, N}, ml[2] = {16, 16};
  double t;
  if (want("matmul_tiled")) {
    best(1, mm, 2, mg, ml); /* first run compiles the work-group function */
    t = best(rounds, mm, 2, mg, ml);
    printf("matmul_tiled 1024^2: %.1f ms, %.2f GFLOP/s\n", t, 2.0 * N * N * N / t / 1e6);
  }

  uint32_t groups = 1 << 14;
  cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)groups * 256 * 4, NULL, &e);
  CHK(e);
  CHK(clSetKernelArg(red, 0, sizeof out, &out));
  CHK(clSetKernelArg(red, 1, 256 * 4, NULL));
  size_t rg = (size_t)groups * 256, rl = 256;
  if (want("reduce_dynamic")) {
    best(1, red, 1, &rg, &rl);
    t = best(rounds, red, 1, &rg, &rl);
    printf("reduce_dynamic 2^14 x 256: %.1f ms, %.1f M items/s\n", t, groups * 256.0 / t / 1e3);
    uint32_t first = 0;
    CHK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, 4, &first, 0, NULL, NULL));
    if (first != 512) printf("WRONG reduction: %u\n", first);
  }

  CHK(clSetKernelArg(plain, 0, sizeof out, &out));
  if (want("write_global_id")) {
    best(1, plain, 1, &rg, &rl);
    t = best(rounds, plain, 1, &rg, &rl);
    printf("write_global_id 2^22 (no barrier): %.1f ms, %.1f M items/s\n", t, groups * 256.0 / t / 1e3);
  }

  uint32_t ns = 1u << 24;
  cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)ns * 4, NULL, &e),
         y = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)ns * 4, NULL, &e);
  CHK(e);
  float two = 2, one = 1;
  CHK(clEnqueueFillBuffer(q, x, &one, 4, 0, (size_t)ns * 4, 0, NULL, NULL));
  CHK(clEnqueueFillBuffer(q, y, &one, 4, 0, (size_t)ns * 4, 0, NULL, NULL));
  CHK(clSetKernelArg(sx, 0, sizeof two, &two));
  CHK(clSetKernelArg(sx, 1, sizeof x, &x));
  CHK(clSetKernelArg(sx, 2, sizeof y, &y));
  CHK(clSetKernelArg(sx, 3, sizeof ns, &ns));
  size_t sg = ns, sl = 256;
  if (want("saxpy")) {
    best(1, sx, 1, &sg, &sl);
    t = best(rounds, sx, 1, &sg, &sl);
    printf("saxpy 2^24: %.2f ms, %.2f GB/s\n", t, 12.0 * ns / t / 1e6);
  }

  size_t g1 = 1, l1 = 1;
  best(1, plain, 1, &g1, &l1);
  double lat = 1e30;
  for (int r = 0; r < 20 && want("launch"); r++) {
    double t0 = now_us();
    for (int i = 0; i < 2000; i++) {
      CHK(clEnqueueNDRangeKernel(q, plain, 1, NULL, &g1, &l1, 0, NULL, NULL));
      CHK(clFinish(q));
    }
    double d = (now_us() - t0) / 2000;
    if (d < lat) lat = d;
  }
  if (want("launch")) printf("launch + wait (1 item): %.3f us\n", lat);
  return 0;
}
