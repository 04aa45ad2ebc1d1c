// Checks that the float32 sigmoid helpers of the C++ kernels (codegen/src/emit.cpp: dyn_sigmoid's
// float overload and dyn_vsigmoid, with exp's argument clamped to [-86, 88.8] and 2^n applied as
// 2^(n-1) * 2) give, for every one of the 2^32 float inputs, the bits of the form they replaced,
// 1 / (1 + dyn_exp(-x)) and 1 / (1 + dyn_vexp(-x)) (dyn_exp and dyn_vexp are unchanged), scalar
// vectorised by GCC in an omp simd loop as in a kernel; and that the scalar and vector helpers
// agree (NaN results compared as NaN). Any generated kernel source with the vector helpers serves
// as KFILE, e.g. chain6's (bench/kernel_call_l1_cost.cpp's header has the command that writes
// /tmp/k0_l1.cpp); ~40 s of CPU (issue 10, docs/codegen.md "Explicit SIMD"):
//   g++ -O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -fwrapv -std=c++17 -w \
//       -DKFILE='"/tmp/k0_l1.cpp"' bench/sigmoid_exhaustive.cpp -o /tmp/sx && /tmp/sx
#include KFILE
#include <cstdio>
#include <cstring>
static bool differ(float p, float q) {
  bool np = p != p, nq = q != q;
  return np || nq ? np != nq : std::memcmp(&p, &q, 4) != 0;
}
int main() {
  const unsigned kBlock = 1u << 16;
  static float in[kBlock], a[kBlock], b[kBlock], c[kBlock], d[kBlock];
  unsigned long long dScalar = 0, dVector = 0, dBoth = 0;
  for (unsigned long long base = 0; base < (1ULL << 32); base += kBlock) {
    for (unsigned i = 0; i < kBlock; ++i) { unsigned u = (unsigned)(base + i); std::memcpy(&in[i], &u, 4); }
    #pragma omp simd
    for (unsigned i = 0; i < kBlock; ++i) a[i] = 1.0f / (1.0f + dyn_exp(-in[i]));
    #pragma omp simd
    for (unsigned i = 0; i < kBlock; ++i) b[i] = dyn_sigmoid(in[i]);
    for (unsigned i = 0; i < kBlock; i += 8) dyn_vstore(c + i, 1.0f / (1.0f + dyn_vexp(-dyn_vload(in + i))));
    for (unsigned i = 0; i < kBlock; i += 8) dyn_vstore(d + i, dyn_vsigmoid(dyn_vload(in + i)));
    for (unsigned i = 0; i < kBlock; ++i) {
      if (differ(a[i], b[i]) && dScalar++ < 5) std::printf("scalar: %a gives %a, was %a\n", in[i], b[i], a[i]);
      if (differ(c[i], d[i]) && dVector++ < 5) std::printf("vector: %a gives %a, was %a\n", in[i], d[i], c[i]);
      dBoth += differ(b[i], d[i]);
    }
  }
  std::printf("sigmoid against 1 / (1 + exp(-x)): scalar %llu, vector %llu of 2^32 inputs differ; "
              "scalar against vector: %llu\n", dScalar, dVector, dBoth);
  return dScalar + dVector + dBoth != 0;
}
