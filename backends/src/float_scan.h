// Scans of float32 buffers for NaN and inf that the fused backend's runtime (fused_backend.cpp)
// and its oneDNN conv steps (fused_dnnl_conv.cpp) share. Header-only so that each caller's loop is
// inlined and vectorised with that file's flags; no torch and no oneDNN here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dynamo::backends {

/// The exponent bits of a float32 (all set: NaN or +-inf).
inline constexpr uint32_t kFloatExponentBits = 0x7f800000u;

/// Max over the exponent bits of n floats: kFloatExponentBits when one of them is NaN or inf.
/// A loop the compiler vectorises.
inline uint32_t topExponent(const float* p, size_t n) {
  uint32_t top = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + i, sizeof u);
    top = std::max(top, u & kFloatExponentBits);
  }
  return top;
}

/// True when none of the n floats at p is NaN or +-inf.
inline bool allFinite(const float* p, size_t n) { return topExponent(p, n) != kFloatExponentBits; }

}  // namespace dynamo::backends
