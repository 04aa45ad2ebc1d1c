// Convolutions as conv steps: which nodes are 2-d convolutions the runtime can call with a
// prepared (batch-norm-folded, prepacked) weight, which eval-mode batch_norm after one can be
// folded into it, and which layout (NCHW or channels-last) each one runs in. The lowering
// driver (lowering.cpp) makes the buffers and the step.
//
//   torch.conv2d(x, w, b, stride, padding, dilation, groups)     (F.conv2d, aten::conv2d)
//   aten::convolution(x, w, b, stride, padding, dilation, transposed=False, output_padding, groups)
//   F.batch_norm(conv, running_mean, running_var, weight, bias, training=False, momentum, eps)
//     -> one step: conv(x, w * s, (b - mean) * s + bias) with s = weight / sqrt(running_var + eps)
//   relu(conv or folded batch_norm), F.relu(.., inplace=True), relu_, F.hardtanh(.., lo, hi)
//     -> the step's post-op: oneDNN applies it as it writes the conv's output
//   F.max_pool2d (no indices) / avg_pool2d / adaptive_avg_pool2d of a conv's channels-last result
//     -> an extern call on the result as it is (ATen pools channels-last input into
//        channels-last output), not on a copy in eager's NCHW layout
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>

#include "lowering_internal.h"

namespace dynamo::codegen::detail {
namespace {

// Positional and keyword arguments bound to `params`; missing ones are absent.
std::unordered_map<std::string, const core::Arg*> bindNames(const core::Node& n,
                                                            const std::vector<std::string>& params) {
  std::unordered_map<std::string, const core::Arg*> out;
  for (size_t i = 0; i < n.args().size() && i < params.size(); ++i) out[params[i]] = &n.args()[i];
  for (const auto& [k, v] : n.kwargs()) out[k == "input" ? "self" : k] = &v;
  return out;
}

// An int or a tuple/list of `rank` ints (an int repeats).
bool intList(const core::Arg* a, size_t rank, std::vector<int64_t>* out) {
  out->clear();
  if (a->kind() == core::ArgKind::kInt) {
    out->assign(rank, a->asInt());
    return true;
  }
  if (a->kind() != core::ArgKind::kTuple && a->kind() != core::ArgKind::kList) return false;
  for (const core::Arg& i : a->items()) {
    if (i.kind() != core::ArgKind::kInt) return false;
    out->push_back(i.asInt());
  }
  if (out->size() == 1) out->assign(rank, (*out)[0]);
  return out->size() == rank;
}

bool floatTensor4d(const core::NodeRef& n) {
  const auto& m = n->meta().tensor;
  return m && m->device == "cpu" && m->dtype == "torch.float32" && m->shape.size() == 4 && m->strides;
}

bool isInput1d(const core::NodeRef& n, int64_t size) {
  const auto& m = n->meta().tensor;
  return n->op() == core::NodeOp::kPlaceholder && m && m->device == "cpu" && m->dtype == "torch.float32" &&
         m->shape == std::vector<int64_t>{size} && m->strides;
}

}  // namespace

std::optional<ConvMatch> matchConv(const core::Node& n, std::string* why) {
  if (n.op() != core::NodeOp::kCallFunction) return std::nullopt;
  const core::Target& t = n.target();
  bool aten = t.kind() == core::TargetKind::kAtenOp;
  std::string name = aten ? t.schemaName() : t.qualifiedName();
  bool convolution = name == "aten::convolution";
  if (name != "torch.conv2d" && name != "torch.nn.functional.conv2d" && name != "aten::conv2d" && !convolution) {
    return std::nullopt;
  }
  std::vector<std::string> params = {"self", "weight", "bias", "stride", "padding", "dilation", "groups"};
  if (convolution) params = {"self", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups"};
  auto b = bindNames(n, params);
  auto fail = [&](const std::string& w) -> std::optional<ConvMatch> {
    *why = w;
    return std::nullopt;
  };
  if (!b.count("self") || !b.count("weight") || !b["self"]->isNode() || !b["weight"]->isNode()) {
    return fail("conv2d operands");
  }
  ConvMatch m;
  m.input = b["self"]->asNode();
  m.weight = b["weight"]->asNode();
  if (!floatTensor4d(m.input) || !floatTensor4d(m.weight) || !n.meta().tensor || n.meta().tensor->shape.size() != 4) {
    return fail("conv2d of other than 4-d float32 CPU tensors");
  }
  if (n.meta().tensor->requiresGrad) return fail("conv2d whose result requires grad");
  if (m.weight->op() != core::NodeOp::kPlaceholder) return fail("conv2d weight is not a graph input");
  if (b.count("bias") && b["bias"]->kind() != core::ArgKind::kNone) {
    if (!b["bias"]->isNode() || !isInput1d(b["bias"]->asNode(), m.weight->meta().tensor->shape[0])) {
      return fail("conv2d bias is not a graph input");
    }
    m.bias = b["bias"]->asNode();
  }
  m.stride = {1, 1};
  m.padding = {0, 0};
  m.dilation = {1, 1};
  if (b.count("stride") && !intList(b["stride"], 2, &m.stride)) return fail("conv2d stride");
  if (b.count("padding") && !intList(b["padding"], 2, &m.padding)) return fail("conv2d padding (a string)");
  if (b.count("dilation") && !intList(b["dilation"], 2, &m.dilation)) return fail("conv2d dilation");
  if (b.count("groups")) {
    if (b["groups"]->kind() != core::ArgKind::kInt) return fail("conv2d groups");
    m.groups = b["groups"]->asInt();
  }
  if (convolution) {
    std::vector<int64_t> op;
    if (!b.count("transposed") || b["transposed"]->kind() != core::ArgKind::kBool || b["transposed"]->asBool()) {
      return fail("transposed convolution");
    }
    if (!b.count("output_padding") || !intList(b["output_padding"], 2, &op) || op != std::vector<int64_t>{0, 0}) {
      return fail("convolution output_padding");
    }
  }
  for (const auto& [k, v] : n.kwargs()) {
    if (std::find(params.begin(), params.end(), k == "input" ? "self" : k) == params.end()) {
      return fail("conv2d keyword argument '" + k + "'");
    }
  }
  return m;
}

bool convTakesNchw(const ConvMatch& m, bool inputContiguous) {
  // weight [c_out, c_in / groups, kh, kw], input [n, c_in, h, w] (checked by matchConv)
  const std::vector<int64_t>& w = m.weight->meta().tensor->shape;
  const int64_t cin = m.input->meta().tensor->shape[1];
  if (m.groups != 1) return false;
  if (w[2] == 1 && w[3] == 1) return inputContiguous;
  return cin >= 16;
}

std::optional<BatchNormMatch> matchEvalBatchNorm(const core::Node& bn, const core::Node& input) {
  if (bn.op() != core::NodeOp::kCallFunction || bn.target().kind() == core::TargetKind::kAtenOp ||
      bn.target().qualifiedName() != "torch.nn.functional.batch_norm") {
    return std::nullopt;
  }
  auto b = bindNames(bn, {"self", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"});
  if (!b.count("self") || !b["self"]->isNode() || b["self"]->asNode().get() != &input) return std::nullopt;
  if (!b.count("training") || b["training"]->kind() != core::ArgKind::kBool || b["training"]->asBool()) {
    return std::nullopt;
  }
  const auto& meta = input.meta().tensor;
  if (!meta || meta->shape.size() != 4 || !bn.meta().tensor || bn.meta().tensor->shape != meta->shape) return std::nullopt;
  int64_t channels = meta->shape[1];
  BatchNormMatch m;
  std::pair<const char*, core::NodeRef*> slots[] = {
      {"running_mean", &m.mean}, {"running_var", &m.var}, {"weight", &m.weight}, {"bias", &m.bias}};
  for (auto& [key, slot] : slots) {
    if (!b.count(key) || b[key]->kind() == core::ArgKind::kNone) continue;
    if (!b[key]->isNode() || !isInput1d(b[key]->asNode(), channels)) return std::nullopt;
    *slot = b[key]->asNode();
  }
  if (!m.mean || !m.var) return std::nullopt;
  if (b.count("eps")) {
    const core::Arg* e = b["eps"];
    if (e->kind() == core::ArgKind::kFloat) m.eps = e->asFloat();
    else if (e->kind() == core::ArgKind::kInt) m.eps = static_cast<double>(e->asInt());
    else return std::nullopt;
  }
  for (const auto& [k, v] : bn.kwargs()) {
    if (k != "training" && k != "momentum" && k != "eps" && k != "weight" && k != "bias" &&
        k != "running_mean" && k != "running_var") {
      return std::nullopt;
    }
  }
  return m;
}

bool isReluOf(const core::Node& relu, const core::Node& input) {
  if (relu.op() != core::NodeOp::kCallFunction && relu.op() != core::NodeOp::kCallMethod) return false;
  if (canonicalOp(relu) != "relu" && inplaceBase(relu) != "relu") return false;
  if (relu.args().empty() || !relu.args()[0].isNode() || relu.args()[0].asNode().get() != &input) return false;
  for (size_t i = 1; i < relu.args().size(); ++i) {
    if (relu.args()[i].kind() != core::ArgKind::kBool) return false;  // F.relu(x, inplace)
  }
  for (const auto& [k, v] : relu.kwargs()) {
    if (k != "inplace") return false;
  }
  const auto& m = relu.meta().tensor;
  return m && m->dtype == "torch.float32";
}

std::optional<std::pair<double, double>> clipBoundsOf(const core::Node& clip, const core::Node& input) {
  if (clip.op() != core::NodeOp::kCallFunction) return std::nullopt;
  if (canonicalOp(clip) != "hardtanh" && inplaceBase(clip) != "hardtanh") return std::nullopt;
  auto b = bindNames(clip, {"self", "min_val", "max_val", "inplace"});
  if (!b.count("self") || !b["self"]->isNode() || b["self"]->asNode().get() != &input) return std::nullopt;
  auto number = [&](const char* key, double dflt, double* out) {
    if (!b.count(key)) {
      *out = dflt;
      return true;
    }
    const core::Arg* a = b[key];
    if (a->kind() == core::ArgKind::kFloat) *out = a->asFloat();
    else if (a->kind() == core::ArgKind::kInt) *out = static_cast<double>(a->asInt());
    else return false;
    return true;
  };
  std::pair<double, double> bounds;
  if (!number("min_val", -1.0, &bounds.first) || !number("max_val", 1.0, &bounds.second)) return std::nullopt;
  if (b.count("inplace") && b["inplace"]->kind() != core::ArgKind::kBool) return std::nullopt;
  for (const auto& [k, v] : clip.kwargs()) {
    if (k != "min_val" && k != "max_val" && k != "inplace" && k != "input") return std::nullopt;
  }
  if (!(bounds.first <= bounds.second)) return std::nullopt;
  const auto& m = clip.meta().tensor;
  if (!m || m->dtype != "torch.float32") return std::nullopt;
  return bounds;
}

bool takesAnyLayout(const core::Node& n) {
  // The result's values are the same whatever the input's strides (a window's maximum or mean
  // over the same elements), and ATen keeps a channels-last input's layout in its result. Only
  // ops that return one tensor: max_pool2d with return_indices and the ATen *_with_indices forms
  // (training graphs) return a tuple whose items the program does not re-lay out, so they keep
  // eager's layout.
  static const char* const kOps[] = {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d"};
  if (n.op() != core::NodeOp::kCallFunction) return false;
  const core::Target& t = n.target();
  std::string name;
  if (t.kind() == core::TargetKind::kAtenOp) {
    const std::string& s = t.schemaName();  // aten::avg_pool2d, aten::_adaptive_avg_pool2d, ...
    if (s.rfind("aten::", 0) != 0) return false;
    name = s.substr(6, s.find('.') == std::string::npos ? std::string::npos : s.find('.') - 6);
  } else {
    const std::string& q = t.qualifiedName();  // torch.nn.functional.max_pool2d, torch.max_pool2d
    std::string prefix = q.substr(0, q.rfind('.') + 1);
    if (prefix != "torch." && prefix != "torch.nn.functional." && prefix != "torch._C._nn.") return false;
    name = q.substr(q.rfind('.') + 1);
  }
  if (std::find(std::begin(kOps), std::end(kOps), name) == std::end(kOps)) return false;
  if (name != "max_pool2d") return true;
  // F.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
  auto indices = [](const core::Arg& a) { return a.kind() != core::ArgKind::kBool || a.asBool(); };
  if (n.args().size() > 6 && indices(n.args()[6])) return false;
  for (const auto& [k, v] : n.kwargs()) {
    if (k == "return_indices" && indices(v)) return false;
  }
  return true;
}

}  // namespace dynamo::codegen::detail
