// The fused backend's mm steps through torch's own oneDNN linear (`mkldnn::_linear_pointwise`,
// registered by torch 2.x builds with oneDNN; absent from torch 1.13). On the stack-2 machines
// (torch 2.11 from PyPI, MKL as its BLAS, an AMD CPU) oneDNN's JIT GEMM takes ~10-20% less CPU
// than the MKL sgemm behind at::mm_out on the MLP block's 512x1024x4096 products
// (docs/performance.md, "mlp_block against inductor: the GEMM"). The weight is read as it is
// (no packed copy is kept between calls, so a changed weight is never served stale).
//
//   a [m, k] (contiguous), w [n, k] (contiguous)  ->  a @ w.T, a new contiguous [m, n] tensor
//
// Private to backends/src (fused_backend.cpp includes it); torch headers stay out of the
// public ones.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace dynamo::backends {

/// Whether this torch registers mkldnn::_linear_pointwise and was built with oneDNN.
bool torchDnnlLinearAvailable();

/// Whether the product a @ w.T takes the oneDNN linear: float32 CPU matrices, both contiguous,
/// matching k, at least kMinMacs multiply-adds (below that, oneDNN's per-call cost is not
/// repaid), and torch.backends.mkldnn enabled by the user.
bool torchDnnlLinearFits(const at::Tensor& a, const at::Tensor& w);

/// a @ w.T by mkldnn::_linear_pointwise (no bias, no post-op), for operands torchDnnlLinearFits
/// accepts; std::nullopt when the op is missing or returns anything but a contiguous float32
/// [m, n] tensor (the caller then runs at::mm_out). The caller holds no GIL and sets no-grad.
std::optional<at::Tensor> torchDnnlLinear(const at::Tensor& a, const at::Tensor& w);

/// The smallest product (m * n * k multiply-adds) sent to oneDNN.
inline constexpr int64_t kMinDnnlLinearMacs = int64_t{1} << 24;

}  // namespace dynamo::backends
