// mm steps through torch's own oneDNN linear: see fused_torch_linear.h. The op is looked up by
// name in the dispatcher and called boxed, so this file builds against torch 1.13 (which has no
// such op: torchDnnlLinearAvailable() is false there) and any torch 2.x signature spelling.
#include "fused_torch_linear.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/version.h>

#include <string>

namespace dynamo::backends {
namespace {

#if TORCH_VERSION_MAJOR >= 2
// The op's handle, looked up once (torch_cpu registers its ops when it is loaded).
const std::optional<c10::OperatorHandle>& linearOp() {
  static const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
  return op;
}
#endif

bool plainFloatMatrix(const at::Tensor& t) {
  return t.defined() && t.dim() == 2 && t.device().is_cpu() && t.layout() == at::kStrided &&
         t.scalar_type() == at::kFloat && !t.is_conj() && !t.is_neg() && t.is_contiguous();
}

}  // namespace

bool torchDnnlLinearAvailable() {
#if TORCH_VERSION_MAJOR >= 2
  return at::hasMKLDNN() && linearOp().has_value();
#else
  return false;
#endif
}

bool torchDnnlLinearFits(const at::Tensor& a, const at::Tensor& w) {
  if (!plainFloatMatrix(a) || !plainFloatMatrix(w) || a.size(1) != w.size(1)) return false;
  const int64_t m = a.size(0), n = w.size(0), k = a.size(1);
  if (m == 0 || n == 0 || k == 0 || m * n * k < kMinDnnlLinearMacs) return false;
  return at::globalContext().userEnabledMkldnn();
}

std::optional<at::Tensor> torchDnnlLinear(const at::Tensor& a, const at::Tensor& w) {
#if TORCH_VERSION_MAJOR >= 2
  const std::optional<c10::OperatorHandle>& op = linearOp();
  if (!op) return std::nullopt;
  // mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr, Scalar?[] scalars,
  //                           str? algorithm) -> Tensor
  torch::jit::Stack stack{c10::IValue(a), c10::IValue(w), c10::IValue(), c10::IValue(std::string("none")),
                          c10::IValue(c10::List<std::optional<at::Scalar>>()), c10::IValue(std::string())};
  op->callBoxed(&stack);
  if (stack.size() != 1 || !stack[0].isTensor()) return std::nullopt;
  at::Tensor y = stack[0].toTensor();
  if (!plainFloatMatrix(y) || y.size(0) != a.size(0) || y.size(1) != w.size(0)) return std::nullopt;
  return y;
#else
  (void)a;
  (void)w;
  return std::nullopt;
#endif
}

}  // namespace dynamo::backends
