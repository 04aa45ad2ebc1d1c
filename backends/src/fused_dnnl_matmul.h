// The fused backend's batched matrix products (bmm steps) through oneDNN's matmul primitive.
// ATen 1.13 without MKL (Debian's build: OpenBLAS) computes bmm as one BLAS call per batch
// entry, each of which wakes OpenBLAS's own threads: the attention products of a
// TransformerEncoderLayer step (128 entries of 128x64 @ 64x128) cost ~2x the CPU of one oneDNN
// batched matmul (docs/performance.md, "Training steps: where the time goes"). No torch and no
// oneDNN header here: fused_backend.cpp includes this.
//
//   make: the operands' and the result's sizes and strides  ->  one matmul primitive
//   run:  a, b (those strides)  ->  out (its strides), scratchpad in the caller's workspace
//
// A DnnlMatmul is immutable after make() and run() is safe from several threads at once (each
// call brings its own workspace and stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dynamo::backends {

/// What a bmm step computes: out [B, m, n] = a [B, m, k] @ b [B, k, n], float32, each operand
/// in its own strides (elements; one of each operand's two inner strides is 1).
struct DnnlMatmulShape {
  std::vector<int64_t> a, aStrides;      ///< [B, m, k] and its strides
  std::vector<int64_t> b, bStrides;      ///< [B, k, n] and its strides
  std::vector<int64_t> out, outStrides;  ///< [B, m, n] and its strides
};

/// One bmm step's oneDNN primitive.
class DnnlMatmul {
 public:
  /// Makes the primitive. Throws std::runtime_error when oneDNN cannot, or would use its
  /// reference implementation (the caller runs ATen's bmm instead).
  static std::unique_ptr<DnnlMatmul> make(const DnnlMatmulShape& shape);
  ~DnnlMatmul();
  DnnlMatmul(const DnnlMatmul&) = delete;
  DnnlMatmul& operator=(const DnnlMatmul&) = delete;

  /// The shape make() was given (the runtime compares the call's strides against it).
  const DnnlMatmulShape& shape() const;
  /// Bytes of per-call workspace run() needs (oneDNN's scratchpad).
  size_t workspaceBytes() const;
  /// out = a @ b; workspace: workspaceBytes() bytes, 64-byte aligned, this call's own.
  void run(const float* a, const float* b, float* out, void* workspace) const;
  /// oneDNN's name of the implementation it chose, for logs.
  std::string describe() const;

  struct Impl;

 private:
  explicit DnnlMatmul(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynamo::backends
