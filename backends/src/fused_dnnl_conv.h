// The fused backend's inference conv steps through oneDNN's own API (dnnl.hpp): one convolution
// primitive per compiled conv step, made once from the step's shapes, writing its output into
// memory the program plans (an arena slot or a pool block) rather than a tensor it allocates,
// with the ReLU / ReLU6 after it as the primitive's post-op. No torch and no oneDNN header here:
// fused_backend.cpp includes this.
//
// The weight is NOT kept: every run reads the live weight (and the batch_norm scale and bias the
// caller folds from the live statistics) and reorders it into the primitive's blocked format in
// the call's workspace. A packed copy cached by data pointer and version went stale on writes
// that leave the version alone (`p.data.add_()`, `torch.nn.init.*_`, numpy views, a train-mode
// batch_norm's running statistics), and held ~43 MiB on resnet18 that eager never holds.
//
//   make:  shapes  ->  primitive desc (src/dst in the buffers' layouts, or oneDNN's choice when
//          `blocked`), the weight reorder (oihw -> the primitive's format), reorders for src/dst
//   run:   weight [* scale, NaN/inf scan] -> reorder -> packed weight (workspace)
//          src (input buffer's strides) -> [reorder into workspace] -> conv + post-op
//          -> [workspace -> reorder] -> dst (result buffer's strides)
//
//   workspace:  [ packed weight | phase 1: folded weight, weight reorder's scratchpad          ]
//                               [ phase 2: conv scratchpad, src, dst, act. reorders' scratch  ]
//
// A DnnlConv is immutable after make() and run() is safe from several threads at once: each
// call brings its own workspace and stream.
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

/// One call's weights, as they are now (read by run(), never kept).
struct DnnlConvWeights {
  const float* weight = nullptr;  ///< contiguous [O, C / groups, KH, KW]
  const float* scale = nullptr;   ///< [O] factor per output channel (a folded batch_norm), or null
  const float* bias = nullptr;    ///< [O], present exactly when the shape has a bias
};

/// One conv step's oneDNN primitive (the weight is packed on every call, see above).
class DnnlConv {
 public:
  /// Makes the primitive and its reorders. Throws std::runtime_error when oneDNN cannot (the
  /// caller falls back to ATen).
  static std::unique_ptr<DnnlConv> make(const DnnlConvShape& shape);
  ~DnnlConv();
  DnnlConv(const DnnlConv&) = delete;
  DnnlConv& operator=(const DnnlConv&) = delete;

  /// Bytes of per-call workspace run() needs (the packed weight, oneDNN's scratchpads and the
  /// reorder buffers).
  size_t workspaceBytes() const;
  /// Computes dst = post(conv(src, weight * scale) + bias); src and dst in the strides of make()'s
  /// shape, not overlapping; workspace: workspaceBytes() bytes, 64-byte aligned, this call's own.
  /// With `checkFinite`, returns false without writing dst when the weight, scale or bias hold a
  /// NaN or inf (a post-op would map a NaN output to its lower bound; the caller runs ATen).
  bool run(const float* src, float* dst, const DnnlConvWeights& weights, bool checkFinite, void* workspace) const;
  /// oneDNN's name of the implementation it chose ("jit:avx2", "brg:avx2", ...) and the
  /// formats, for logs.
  std::string describe() const;

  struct Impl;

 private:
  explicit DnnlConv(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynamo::backends
