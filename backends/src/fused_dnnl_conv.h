// The fused backend's inference conv steps through oneDNN's own API (dnnl.hpp): one convolution
// primitive per compiled conv step, made once with its weight reordered into the primitive's
// preferred (blocked) format, writing its output into memory the program plans (an arena slot
// or a pool block) rather than a tensor it allocates, with the ReLU / ReLU6 after it as the
// primitive's post-op. No torch and no oneDNN header here: fused_backend.cpp includes this.
//
//   make:  shape + folded weight/bias  ->  primitive desc (src/dst in the buffers' layouts, or
//          oneDNN's choice when `blocked`), packed weight (owned), reorders for src/dst
//   run:   src (input buffer's strides) -> [reorder into workspace] -> conv + post-op
//          -> [workspace -> reorder] -> dst (result buffer's strides)
//
// A DnnlConv is immutable after make() and run() is safe from several threads at once: each
// call brings its own workspace (oneDNN's scratchpad and the reorder buffers) and stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dynamo::backends {

/// The elementwise op oneDNN applies as it writes a conv's output.
enum class DnnlPostOp {
  kNone,
  kRelu,  ///< max(x, 0) (NaN stays NaN)
  kClip,  ///< min(max(x, lo), hi): ReLU6, hardtanh
};

/// What a conv step computes: 2-d, float32, every size known.
struct DnnlConvShape {
  std::vector<int64_t> input, inputStrides;    ///< [N, C, H, W] and its strides (elements)
  std::vector<int64_t> weight;                 ///< [O, C / groups, KH, KW] (contiguous when packed)
  std::vector<int64_t> output, outputStrides;  ///< [N, O, OH, OW] and its strides (elements)
  std::vector<int64_t> stride, padding, dilation;  ///< as at::convolution takes them
  int64_t groups = 1;                          ///< channel groups
  bool bias = false;                           ///< a bias is added
  bool blocked = false;  ///< compute in the layout oneDNN prefers (nChw8c on AVX2), reordering
                         ///< the activations in and out; else in the result buffer's layout
  DnnlPostOp post = DnnlPostOp::kNone;  ///< the post-op
  float clipLo = 0, clipHi = 0;         ///< kClip's bounds
};

/// One conv step's oneDNN primitive and packed weight.
class DnnlConv {
 public:
  /// Makes the primitive and packs `weight` (contiguous [O, C / groups, KH, KW]) and `bias`
  /// ([O], or null) into memory it owns; the caller may free both afterwards. Throws
  /// std::runtime_error when oneDNN cannot (the caller falls back to ATen).
  static std::unique_ptr<DnnlConv> make(const DnnlConvShape& shape, const float* weight, const float* bias);
  ~DnnlConv();
  DnnlConv(const DnnlConv&) = delete;
  DnnlConv& operator=(const DnnlConv&) = delete;

  /// Bytes of per-call workspace run() needs (oneDNN's scratchpad and the reorder buffers).
  size_t workspaceBytes() const;
  /// Computes dst = post(conv(src)); src and dst in the strides of make()'s shape, not
  /// overlapping; workspace: workspaceBytes() bytes, 64-byte aligned, this call's own.
  void run(const float* src, float* dst, void* workspace) const;
  /// oneDNN's name of the implementation it chose ("jit:avx2", "brg:avx2", ...) and the
  /// formats, for logs.
  std::string describe() const;

  struct Impl;

 private:
  explicit DnnlConv(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynamo::backends
