// Checks that the fused backend's float32 dyn_exp (codegen/src/emit.cpp) gives the same bits as
// its earlier form, which ended in explicit inf / 0 / NaN selects, for every one of the 2^32
// float inputs (NaN results compared as NaN). Used for issue 10's chain6 work (docs/performance.md,
// "chain6: dyn_exp without selects"); ~1 min on one core:
//   g++ -O3 -march=native -fno-math-errno -fno-trapping-math -fwrapv bench/exp_exhaustive.cpp && ./a.out
// The flags are the kernel cache's (codegen/src/kernel_cache.cpp); the loops are vectorised as
// the generated kernels are.
#include <cmath>
#include <cstdio>
#include <cstring>

#define EXP_BODY                                                                                  \
  float xc = x < -104.0f ? -104.0f : (x > 88.8f ? 88.8f : x);                                     \
  float fx = floorf(xc * 1.44269504088896341f + 0.5f);                                            \
  float r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;                                         \
  float z = r * r;                                                                                \
  float y = (((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r +          \
               4.1665795894E-2f) * r + 1.6666665459E-1f) * r + 5.0000001201E-1f) * z + r + 1.0f; \
  int n = (int)fx;                                                                                \
  int n1 = n >> 1, n2 = n - n1;                                                                   \
  int b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;                                               \
  float s1, s2;                                                                                   \
  std::memcpy(&s1, &b1, 4);                                                                       \
  std::memcpy(&s2, &b2, 4);

static inline float expWithSelects(float x) {
  EXP_BODY
  float res = y * s1 * s2;
  res = x > 88.72283935546875f ? __builtin_inff() : res;
  res = x < -103.972076416015625f ? 0.0f : res;
  return x != x ? x : res;
}

static inline float expNow(float x) {
  EXP_BODY
  return y * s1 * s2;
}

int main() {
  const unsigned kBlock = 1u << 16;
  static float in[kBlock], a[kBlock], b[kBlock];
  unsigned long long differ = 0;
  for (unsigned long long base = 0; base < (1ULL << 32); base += kBlock) {
    for (unsigned i = 0; i < kBlock; ++i) {
      unsigned u = static_cast<unsigned>(base + i);
      std::memcpy(&in[i], &u, 4);
    }
    for (unsigned i = 0; i < kBlock; ++i) a[i] = expWithSelects(in[i]);
    for (unsigned i = 0; i < kBlock; ++i) b[i] = expNow(in[i]);
    for (unsigned i = 0; i < kBlock; ++i) {
      bool nanA = a[i] != a[i], nanB = b[i] != b[i];
      if (nanA || nanB ? nanA != nanB : std::memcmp(&a[i], &b[i], 4) != 0) ++differ;
    }
  }
  std::printf("%llu of 2^32 inputs differ\n", differ);
  return differ != 0;
}
