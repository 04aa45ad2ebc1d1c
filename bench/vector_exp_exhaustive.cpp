// Checks that the explicit-SIMD helpers of the C++ kernels (codegen/src/emit.cpp, kVectorHelpers:
// dyn_vexp, dyn_vsigmoid) give the bits of their scalar twins (dyn_exp, dyn_sigmoid, vectorised by
// GCC in an omp simd loop as in a kernel) for every one of the 2^32 float inputs (NaN results
// compared as NaN). Any generated kernel source with the vector helpers serves as KFILE, e.g.
// chain6's (bench/kernel_call_l1_cost.cpp's header has the command that writes /tmp/k0_l1.cpp);
// ~35 s of CPU (issue 10, docs/codegen.md "Explicit SIMD"):
//   g++ -O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -fwrapv -std=c++17 -w \
//       -DKFILE='"/tmp/k0_l1.cpp"' bench/vector_exp_exhaustive.cpp -o /tmp/vx && /tmp/vx
#include KFILE
#include <cstdio>
#include <cstring>
int main() {
  const unsigned kBlock = 1u << 16;
  static float in[kBlock], a[kBlock], b[kBlock], c[kBlock], d[kBlock];
  unsigned long long differ = 0, differS = 0;
  for (unsigned long long base = 0; base < (1ULL << 32); base += kBlock) {
    for (unsigned i = 0; i < kBlock; ++i) { unsigned u = (unsigned)(base + i); std::memcpy(&in[i], &u, 4); }
    #pragma omp simd
    for (unsigned i = 0; i < kBlock; ++i) a[i] = dyn_exp(in[i]);
    for (unsigned i = 0; i < kBlock; i += 8) dyn_vstore(b + i, dyn_vexp(dyn_vload(in + i)));
    #pragma omp simd
    for (unsigned i = 0; i < kBlock; ++i) c[i] = dyn_sigmoid(in[i]);
    for (unsigned i = 0; i < kBlock; i += 8) dyn_vstore(d + i, dyn_vsigmoid(dyn_vload(in + i)));
    for (unsigned i = 0; i < kBlock; ++i) {
      bool na = a[i] != a[i], nb = b[i] != b[i];
      if (na || nb ? na != nb : std::memcmp(&a[i], &b[i], 4) != 0) ++differ;
      na = c[i] != c[i], nb = d[i] != d[i];
      if (na || nb ? na != nb : std::memcmp(&c[i], &d[i], 4) != 0) ++differS;
    }
  }
  std::printf("exp: %llu of 2^32 inputs differ; sigmoid: %llu\n", differ, differS);
  return differ + differS != 0;
}
