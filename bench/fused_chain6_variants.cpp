// chain6 (bench/fused.py) taken apart on the CPU: the generated kernel against variants of it and
// against copy anchors, the same 8M float32, buffers reused, 64-byte aligned, first touched by the
// same threads, one OpenMP pool (issue 10, "80% of copy bandwidth"; docs/performance.md,
// "chain6: where the rest goes"). Build with the kernel cache's flags, the kernel's source from
// DYNAMO_LOGS=output_code (as for bench/kernel_l1_cost.cpp):
//   DYNAMO_LOGS=output_code PYTHONPATH=build/python /usr/bin/python3 -c 'import torch, dynamo;
//     dynamo.optimize("fused")(lambda x: ((x * 2 + 1).relu() * 0.5 - 0.25).sigmoid())(torch.randn(8 << 20))' \
//     2>&1 | awk '/^\/\/ k0_sigmoid: generated/{p=1} p' > /tmp/k0.cpp
//   g++ -O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -fwrapv -std=c++17 -w \
//       -DKFILE='"/tmp/k0.cpp"' bench/fused_chain6_variants.cpp -o /tmp/c6v
//   OMP_WAIT_POLICY=passive /tmp/c6v 2 41        # threads, interleaved repeats
//   /tmp/c6v 2 5                                  # the last line (2 threads at once) needs spinning
// Rows: k0 the generated kernel; nt the same body computed into an L1 block then written with
// streaming stores (no read-for-ownership of the output); pf k0 with software prefetch 1 KiB
// ahead; vec and vec_nt the same chain hand-written with vector builtins (below), ordinary and
// streaming stores; copy_plain the kernel's loop as a copy (what torch's copy_, the bench's anchor, does);
// copy_nt a streaming copy (not what glibc 2.36 memcpy does here: its non-temporal threshold is 192 MiB). Wall-clock medians and minima
// and the process CPU time (with OMP_WAIT_POLICY=passive, no spinning) per call; then the body
// alone over an L1-resident slice on 1 thread and on 2 threads at once (minimum over the repeats
// in which both threads really ran together): equal figures say the two CPUs are separate cores.
// Since the emitter's explicit SIMD (docs/codegen.md), k0 is itself a vector-builtin kernel like
// `vec` (vmaxps/vminps, the same exp steps); BODY below still calls the scalar helpers, which the
// kernel's source keeps for its remainder and for CPUs without AVX2.
// Nothing is asserted: figures only.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>
#include <omp.h>
#include <sys/resource.h>
#include KFILE

#define BODY(V) dyn_sigmoid(((float)(((float)(dyn_max(((float)(((float)((V) * ((float)2))) + ((float)1))), ((float)0)) * ((float)0.5))) - ((float)0.25))))
static const long long kN = 8LL << 20;
typedef float v8sf __attribute__((vector_size(32)));

static void kNt(const float* __restrict__ b0, float* __restrict__ b1) {
  #pragma omp parallel
  {
    alignas(64) float tmp[2048];
    #pragma omp for schedule(static)
    for (long long xb = 0; xb < kN; xb += 2048) {
      #pragma omp simd
      for (long long i = 0; i < 2048; ++i) tmp[i] = BODY(b0[xb + i]);
      for (long long i = 0; i < 2048; i += 8) __builtin_ia32_movntps256(b1 + xb + i, *(const v8sf*)(tmp + i));
    }
    __builtin_ia32_sfence();
  }
}
static void kPf(const float* __restrict__ b0, float* __restrict__ b1) {
  #pragma omp parallel for schedule(static)
  for (long long xb = 0; xb < kN; xb += 64) {
    for (int l = 0; l < 64; l += 16) __builtin_prefetch(b0 + xb + 256 + l, 0, 0), __builtin_prefetch(b1 + xb + 256 + l, 1, 0);
    #pragma omp simd
    for (long long x0 = xb; x0 < xb + 64; ++x0) b1[x0] = BODY(b0[x0]);
  }
}
// The same chain hand-written with vector builtins: vmaxps/vminps for relu and exp's clamp where
// GCC makes compares and blends of the generated ternaries (~37 instructions per 8 elements
// against ~50), the same exp steps and the same division.
typedef int v8si __attribute__((vector_size(32)));
static inline v8sf bc(float f) { return (v8sf){f, f, f, f, f, f, f, f}; }
static inline v8sf vecBody(v8sf v) {
  v8sf t = __builtin_ia32_maxps256(bc(0.0f), v * bc(2.0f) + bc(1.0f)) * bc(0.5f) - bc(0.25f);
  v8sf xc = __builtin_ia32_minps256(__builtin_ia32_maxps256(-t, bc(-104.0f)), bc(88.8f));
  v8sf fx = __builtin_ia32_roundps256(xc * bc(1.44269504088896341f) + bc(0.5f), 1);
  v8sf r = xc - fx * bc(0.693359375f) + fx * bc(2.12194440e-4f);
  v8sf y = (((((bc(1.9875691500E-4f) * r + bc(1.3981999507E-3f)) * r + bc(8.3334519073E-3f)) * r +
             bc(4.1665795894E-2f)) * r + bc(1.6666665459E-1f)) * r + bc(5.0000001201E-1f)) * (r * r) + r + bc(1.0f);
  v8si n = __builtin_convertvector(fx, v8si);
  v8si n1 = n >> 1, b1 = (n1 + 127) << 23, b2 = (n - n1 + 127) << 23;
  return bc(1.0f) / (bc(1.0f) + y * (v8sf)b1 * (v8sf)b2);
}
static void kVec(const float* __restrict__ b0, float* __restrict__ b1) {
  #pragma omp parallel for schedule(static)
  for (long long x = 0; x < kN; x += 8) *(v8sf*)(b1 + x) = vecBody(*(const v8sf*)(b0 + x));
}
static void kVecNt(const float* __restrict__ b0, float* __restrict__ b1) {
  #pragma omp parallel
  {
    #pragma omp for schedule(static)
    for (long long x = 0; x < kN; x += 8) __builtin_ia32_movntps256(b1 + x, vecBody(*(const v8sf*)(b0 + x)));
    __builtin_ia32_sfence();
  }
}
static void copyPlain(const float* __restrict__ b0, float* __restrict__ b1) {
  #pragma omp parallel for schedule(static)
  for (long long x0 = 0; x0 < kN; ++x0) b1[x0] = b0[x0];
}
static void copyNt(const float* __restrict__ b0, float* __restrict__ b1) {
  #pragma omp parallel
  {
    #pragma omp for schedule(static)
    for (long long x = 0; x < kN; x += 8) __builtin_ia32_movntps256(b1 + x, *(const v8sf*)(b0 + x));
    __builtin_ia32_sfence();
  }
}
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static double cpu() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + 1e-6 * (r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}
static double med(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static double mn(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// The body over an L1-resident slice, each thread its own, the repeats started together.
static double l1Body(int threads) {
  const int m = 8192, reps = 5000;
  std::vector<double> t0(2 * reps), t1(2 * reps);
  #pragma omp parallel num_threads(threads)
  {
    int id = omp_get_thread_num();
    std::vector<float> x(m), y(m);
    for (int i = 0; i < m; ++i) x[i] = (i % 1000) * 0.01f - 5.f;
    for (int r = 0; r < reps; ++r) {
      #pragma omp barrier
      t0[2 * r + id] = now();
      for (int pass = 0; pass < 16; ++pass) {  // ~0.1 ms: long against the barrier's skew
        #pragma omp simd
        for (int i = 0; i < m; ++i) y[i] = BODY(x[i]);
        __asm__ volatile("" ::: "memory");
      }
      t1[2 * r + id] = now();
    }
  }
  double best = 1e9;
  for (int r = 0; r < reps; ++r) {
    double d = t1[2 * r] - t0[2 * r];
    if (threads == 2) {
      double d1 = t1[2 * r + 1] - t0[2 * r + 1];
      double both = std::min(t1[2 * r], t1[2 * r + 1]) - std::max(t0[2 * r], t0[2 * r + 1]);
      if (both < 0.95 * std::max(d, d1)) continue;  // the threads did not run together
      d = std::max(d, d1);
    }
    best = std::min(best, d);
  }
  return best < 1e9 ? best / (16.0 * m) * 1e9 : -1;  // -1: the threads never ran together
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 41;
  omp_set_num_threads(threads);
  float* x = static_cast<float*>(aligned_alloc(64, kN * 4));
  float* y = static_cast<float*>(aligned_alloc(64, kN * 4));
  #pragma omp parallel for schedule(static)
  for (long long i = 0; i < kN; ++i) x[i] = (i % 1000) * 0.01f - 5.f, y[i] = 0;
  void* args[2] = {x, y};
  struct Row { const char* name; void (*f)(const float*, float*); std::vector<double> wall, cpu; };
  std::vector<Row> rows = {{"k0", [](const float* a, float* b) { void* p[2] = {(void*)a, b}; k0_sigmoid(p); }},
                           {"nt", kNt}, {"pf", kPf}, {"vec", kVec}, {"vec_nt", kVecNt},
                           {"copy_plain", copyPlain}, {"copy_nt", copyNt}};
  k0_sigmoid(args);
  for (int r = 0; r < 3; ++r) for (auto& row : rows) row.f(x, y);
  for (int r = 0; r < reps; ++r) {
    for (auto& row : rows) {
      double c0 = cpu(), t0 = now();
      row.f(x, y);
      row.wall.push_back(now() - t0);
      row.cpu.push_back(cpu() - c0);
    }
  }
  double load;
  getloadavg(&load, 1);
  std::printf("threads %d, repeats %d, load %.1f; of copy = copy_plain / row (medians, minima)\n", threads, reps, load);
  for (auto& row : rows)
    std::printf("%-11s wall med %7.2f min %7.2f ms  cpu med %7.2f ms  of copy_plain %.2f %.2f  of copy_nt %.2f %.2f\n",
                row.name, med(row.wall) * 1e3, mn(row.wall) * 1e3, med(row.cpu) * 1e3,
                med(rows[5].wall) / med(row.wall), mn(rows[5].wall) / mn(row.wall),
                med(rows[6].wall) / med(row.wall), mn(rows[6].wall) / mn(row.wall));
  // (with OMP_WAIT_POLICY=passive the barrier's wake-up skew under load can leave no window: -1)
  std::printf("body in L1: %.3f ns/element on 1 thread, %.3f on each of 2 threads at once\n", l1Body(1), l1Body(2));
}
