// Matrix products as matmul steps: which nodes are linear / mm / addmm of float32 CPU tensors the
// runtime computes with at::mm_out into pooled memory. The lowering driver (lowering.cpp) makes
// the buffers, the step and the bias epilogue.
//
//   F.linear(x, w, b) / aten::linear     x [..., k], w [n, k], b [n] or None  -> x @ w.T (+ b)
//   torch.mm(a, b) / aten::mm            a [m, k], b [k, n]                   -> a @ b
//   aten::addmm(bias, a, b)              beta = alpha = 1                     -> a @ b + bias
//   torch.bmm(a, b) / aten::bmm          a [B, m, k], b [B, k, n]             -> a @ b per batch
//
// Training graphs (the AOT layer's forward and backward) take their operands through aten::t /
// transpose views; those stay extern views and the product reads them strided, as eager does.
#include "lowering_internal.h"

namespace dynamo::codegen::detail {
namespace {

bool floatTensor(const core::Arg* a, size_t minRank, size_t maxRank) {
  if (!a || !a->isNode()) return false;
  const auto& m = a->asNode()->meta().tensor;
  return m && m->device == "cpu" && m->dtype == "torch.float32" && m->strides && m->shape.size() >= minRank &&
         m->shape.size() <= maxRank;
}

const std::vector<int64_t>& shapeOf(const core::Arg* a) { return a->asNode()->meta().tensor->shape; }

}  // namespace

std::optional<MatmulMatch> matchMatmul(const core::Node& n) {
  if (n.op() != core::NodeOp::kCallFunction || !n.meta().tensor || n.meta().tensor->dtype != "torch.float32" ||
      n.meta().tensor->requiresGrad) {
    return std::nullopt;
  }
  const core::Target& t = n.target();
  std::string name = t.kind() == core::TargetKind::kAtenOp ? t.schemaName() : t.qualifiedName();
  bool linear = name == "torch._C._nn.linear" || name == "torch.nn.functional.linear" || name == "aten::linear";
  bool mm = name == "torch.mm" || name == "aten::mm";
  bool addmm = name == "aten::addmm";
  bool bmm = name == "torch.bmm" || name == "aten::bmm";
  if (!linear && !mm && !addmm && !bmm) return std::nullopt;
  // positional arguments only, except a linear's bias by name
  const core::Arg* bias = nullptr;
  for (const auto& [k, v] : n.kwargs()) {
    if (!(linear && k == "bias")) return std::nullopt;
    bias = &v;
  }
  const auto& args = n.args();
  MatmulMatch m;
  if (linear) {
    if (args.size() < 2 || args.size() > 3 || (args.size() == 3 && bias)) return std::nullopt;
    if (args.size() == 3) bias = &args[2];
    if (!floatTensor(&args[0], 1, 8) || !floatTensor(&args[1], 2, 2)) return std::nullopt;
    if (shapeOf(&args[0]).back() != shapeOf(&args[1])[1] || shapeOf(&args[0]).size() < 2) return std::nullopt;
    m.a = args[0].asNode();
    m.b = args[1].asNode();
    m.transposeB = true;
  } else if (bmm) {
    if (args.size() != 2 || !floatTensor(&args[0], 3, 3) || !floatTensor(&args[1], 3, 3)) return std::nullopt;
    const auto& sa = shapeOf(&args[0]);
    const auto& sb = shapeOf(&args[1]);
    if (sa[0] != sb[0] || sa[2] != sb[1]) return std::nullopt;
    m.a = args[0].asNode();
    m.b = args[1].asNode();
    m.batched = true;
  } else {
    size_t first = addmm ? 1 : 0;
    if (args.size() != first + 2) return std::nullopt;
    if (addmm) bias = &args[0];
    if (!floatTensor(&args[first], 2, 2) || !floatTensor(&args[first + 1], 2, 2)) return std::nullopt;
    if (shapeOf(&args[first])[1] != shapeOf(&args[first + 1])[0]) return std::nullopt;
    m.a = args[first].asNode();
    m.b = args[first + 1].asNode();
  }
  if (bias && bias->kind() != core::ArgKind::kNone) {
    if (!floatTensor(bias, 1, 2)) return std::nullopt;
    m.bias = bias->asNode();
  }
  return m;
}

}  // namespace dynamo::codegen::detail
