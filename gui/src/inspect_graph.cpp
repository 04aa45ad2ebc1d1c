// InspectGraph: nodes, op categories and the group tree (see inspect_graph.h).
#include "dynamo/gui/inspect_graph.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

#include "dynamo/common/hash.h"
#include "dynamo/core/graph.h"
#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_serializer.h"

namespace dynamo::gui {
namespace {

struct CategoryInfo {
  OpCategory id;
  std::string_view name;
  std::string_view colour;
  std::string_view description;
};

const CategoryInfo kCategories[] = {
#define DYNAMO_OP_CATEGORY(id, name, colour, description) {OpCategory::id, name, colour, description},
#include "dynamo/gui/op_categories.def"
#undef DYNAMO_OP_CATEGORY
};

const CategoryInfo& info(OpCategory c) { return kCategories[static_cast<size_t>(c)]; }

bool oneOf(std::string_view s, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

/// "torch.nn.functional.relu" -> "relu", "torch.ops.aten.addmm.default" -> "addmm",
/// "operator.__iadd__" -> "iadd", "relu_" -> "relu".
std::string baseName(std::string_view target) {
  std::string_view s = target;
  if (size_t ops = s.find("ops."); ops != std::string_view::npos) {
    std::string_view rest = s.substr(ops + 4);              // aten.addmm.default
    size_t dot = rest.find('.');
    if (dot != std::string_view::npos) rest = rest.substr(dot + 1);  // addmm.default
    s = rest.substr(0, rest.find('.'));
  } else if (size_t dot = s.rfind('.'); dot != std::string_view::npos) {
    s = s.substr(dot + 1);
  }
  std::string out(s);
  if (out.size() > 4 && out.rfind("__", 0) == 0 && out.compare(out.size() - 2, 2, "__") == 0)
    out = out.substr(2, out.size() - 4);
  while (out.size() > 1 && out.back() == '_') out.pop_back();
  while (!out.empty() && out.front() == '_') out.erase(out.begin());
  return out;
}

std::string dtypeShort(const std::string& dtype) {
  static const std::map<std::string, std::string> kShort = {
      {"torch.float32", "f32"}, {"torch.float64", "f64"}, {"torch.float16", "f16"},
      {"torch.bfloat16", "bf16"}, {"torch.int64", "i64"}, {"torch.int32", "i32"},
      {"torch.int16", "i16"}, {"torch.int8", "i8"}, {"torch.uint8", "u8"}, {"torch.bool", "b8"},
      {"torch.complex64", "c64"}, {"torch.complex128", "c128"}};
  auto it = kShort.find(dtype);
  if (it != kShort.end()) return it->second;
  return dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
}

std::string intList(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

/// Bytes of one element of a dtype ("torch.float32" -> 4); 0 when unknown.
std::int64_t dtypeBytes(const std::string& dtype) {
  static const std::map<std::string, std::int64_t> kBytes = {
      {"torch.float32", 4}, {"torch.float64", 8}, {"torch.float16", 2}, {"torch.bfloat16", 2},
      {"torch.int64", 8}, {"torch.int32", 4}, {"torch.int16", 2}, {"torch.int8", 1},
      {"torch.uint8", 1}, {"torch.bool", 1}, {"torch.complex64", 8}, {"torch.complex128", 16}};
  auto it = kBytes.find(dtype);
  return it == kBytes.end() ? 0 : it->second;
}

void fillTensor(InspectNode& n, const core::NodeMeta& meta) {
  if (!meta.tensor) return;
  const core::TensorMeta& t = *meta.tensor;
  n.tensor = dtypeShort(t.dtype) + intList(t.shape);
  n.tensorBytes = dtypeBytes(t.dtype);
  for (int64_t d : t.shape) n.tensorBytes = d < 0 ? 0 : n.tensorBytes * d;
  n.tensorDetail = "shape " + intList(t.shape);
  if (t.strides) n.tensorDetail += ", strides " + intList(*t.strides);
  n.tensorDetail += ", " + t.dtype + ", " + t.device;
  if (t.strides) n.tensorDetail += std::string(", ") + core::memoryFormatName(t.memoryFormat);
  if (t.requiresGrad) n.tensorDetail += ", requires_grad";
  // With dynamic dimensions: the sizes as the trace knows them ("[s0, 16]"; static ones as numbers).
  if (t.symShape.size() == t.shape.size() && !t.symShape.empty()) {
    n.symbolicShape = "[";
    for (size_t d = 0; d < t.shape.size(); ++d)
      n.symbolicShape += (d ? ", " : "") + (t.symShape[d].empty() ? std::to_string(t.shape[d]) : t.symShape[d]);
    n.symbolicShape += "]";
  }
}

std::string argsText(const core::Node& node) {
  std::string out;
  for (const core::Arg& a : node.args()) {
    if (!out.empty()) out += ", ";
    out += core::printArg(a);
  }
  for (const auto& kv : node.kwargs()) {
    if (!out.empty()) out += ", ";
    out += kv.first + "=" + core::printArg(kv.second);
  }
  return out;
}

}  // namespace

std::string_view opCategoryName(OpCategory c) { return info(c).name; }
std::string_view opCategoryColour(OpCategory c) { return info(c).colour; }
std::string_view opCategoryDescription(OpCategory c) { return info(c).description; }

const std::vector<OpCategory>& allOpCategories() {
  static const std::vector<OpCategory> all = [] {
    std::vector<OpCategory> v;
    for (const CategoryInfo& c : kCategories) v.push_back(c.id);
    return v;
  }();
  return all;
}

OpCategory categorizeOp(std::string_view op, std::string_view target) {
  if (op == "placeholder") return OpCategory::kInput;
  if (op == "output") return OpCategory::kOutput;
  const std::string b = baseName(target);
  if (b.find("norm") != std::string::npos && b != "norm") return OpCategory::kNorm;
  if (b.find("conv") != std::string::npos) return OpCategory::kConv;
  if (b.find("pool") != std::string::npos) return OpCategory::kPool;
  if (oneOf(b, {"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "mv",
                "dot", "scaled_dot_product_attention", "multi_head_attention_forward", "bilinear"}))
    return OpCategory::kMatmul;
  if (oneOf(b, {"relu", "relu6", "gelu", "sigmoid", "tanh", "silu", "hardswish", "hardsigmoid",
                "softmax", "log_softmax", "leaky_relu", "elu", "selu", "celu", "mish", "hardtanh",
                "softplus", "prelu", "glu", "logsigmoid", "threshold"}))
    return OpCategory::kActivation;
  if (oneOf(b, {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "norm",
                "argmax", "argmin", "logsumexp", "all", "any", "var_mean", "std_mean", "cumsum"}))
    return OpCategory::kReduction;
  if (oneOf(b, {"view", "reshape", "flatten", "permute", "transpose", "t", "contiguous", "expand",
                "expand_as", "view_as", "squeeze", "unsqueeze", "cat", "concat", "stack", "split",
                "chunk", "getitem", "size", "narrow", "select", "slice", "unbind", "repeat",
                "flip", "roll", "getattr", "unflatten", "movedim", "tensor_split", "dim", "numel",
                "as_strided", "index_select", "gather", "split_with_sizes", "unsafe_view"}))
    return OpCategory::kShape;
  if (oneOf(b, {"add", "sub", "mul", "div", "iadd", "isub", "imul", "itruediv", "truediv",
                "floordiv", "floor_divide", "pow", "neg", "abs", "exp", "log", "sqrt", "rsqrt",
                "eq", "ne", "lt", "gt", "le", "ge", "where", "clamp", "clip", "maximum",
                "minimum", "addcmul", "addcdiv", "remainder", "mod", "sin", "cos", "reciprocal",
                "rsub", "radd", "rmul", "rtruediv", "and", "or", "xor", "invert", "not_", "sign",
                "erf", "lerp", "fmod", "square", "log1p", "expm1", "floor", "ceil", "round"}))
    return OpCategory::kElementwise;
  return OpCategory::kOther;
}

std::string textHash(std::string_view text) { return sha256Hex(text).substr(0, 16); }

std::shared_ptr<const InspectGraph> InspectGraph::make(std::vector<InspectNode> nodes,
                                                       std::string hash, std::vector<InspectKernel> kernels) {
  auto g = std::shared_ptr<InspectGraph>(new InspectGraph());
  g->nodes_ = std::move(nodes);
  g->hash_ = std::move(hash);
  g->kernels_ = std::move(kernels);
  for (InspectNode& n : g->nodes_)  // a node copied from a graph with kernels into one without
    n.kernels.erase(std::remove_if(n.kernels.begin(), n.kernels.end(),
                                   [&](int k) { return k < 0 || static_cast<size_t>(k) >= g->kernels_.size(); }),
                    n.kernels.end());
  for (size_t i = 0; i < g->nodes_.size(); ++i) g->nodes_[i].index = static_cast<int>(i);
  for (InspectNode& n : g->nodes_) n.users.clear();
  for (const InspectNode& n : g->nodes_)
    for (int in : n.inputs) g->nodes_[static_cast<size_t>(in)].users.push_back(n.index);
  g->buildGroups();
  return g;
}

int InspectGraph::findGroup(const std::string& path) const {
  for (const InspectGroup& g : groups_)
    if (!g.chunk && g.path == path) return g.id;
  return -1;
}

std::vector<int> InspectGraph::groupChain(int group) const {
  std::vector<int> chain;
  for (int g = group; g >= 0; g = groups_[static_cast<size_t>(g)].parent) chain.push_back(g);
  std::reverse(chain.begin(), chain.end());
  return chain;
}

size_t InspectGraph::edgeCount() const {
  size_t n = 0;
  for (const InspectNode& node : nodes_) n += node.inputs.size();
  return n;
}

void InspectGraph::buildGroups() {
  groups_.clear();
  groups_.push_back(InspectGroup{});
  groups_[0].label = "graph";
  std::unordered_map<std::string, int> byPath = {{"", 0}};
  groupOf_.assign(nodes_.size(), 0);
  // Module groups, in order of first appearance.
  auto ensure = [&](const std::string& path, auto& self) -> int {
    auto it = byPath.find(path);
    if (it != byPath.end()) return it->second;
    const size_t dot = path.rfind('.');
    const int parent = self(dot == std::string::npos ? std::string() : path.substr(0, dot), self);
    InspectGroup g;
    g.id = static_cast<int>(groups_.size());
    g.parent = parent;
    g.path = path;
    g.label = path;
    groups_.push_back(g);
    groups_[static_cast<size_t>(parent)].items.push_back(~g.id);
    byPath[path] = g.id;
    return g.id;
  };
  // Display order: user inputs first, then each call after the parameters it is the first to
  // use (the graph lists every input before the body, which would put modules in the order of
  // their parameters' first use rather than of their code).
  std::vector<int> order;
  std::vector<bool> placed(nodes_.size(), false);
  auto place = [&](int i) {
    if (placed[static_cast<size_t>(i)]) return;
    placed[static_cast<size_t>(i)] = true;
    order.push_back(i);
  };
  for (const InspectNode& n : nodes_)
    if (n.op == "placeholder" && n.category != OpCategory::kParameter) place(n.index);
  for (const InspectNode& n : nodes_) {
    if (n.op == "placeholder") continue;
    for (int in : n.inputs)
      if (nodes_[static_cast<size_t>(in)].op == "placeholder") place(in);
    place(n.index);
  }
  for (const InspectNode& n : nodes_) place(n.index);  // parameters nobody uses
  for (int i : order) {
    const int g = ensure(nodes_[static_cast<size_t>(i)].modulePath, ensure);
    groups_[static_cast<size_t>(g)].items.push_back(i);
    groupOf_[static_cast<size_t>(i)] = g;
  }
  // Chunks: a level with more than kMaxGroupItems items is split into runs, repeatedly.
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    while (groups_[gi].items.size() > static_cast<size_t>(kMaxGroupItems)) {
      std::vector<int> items = std::move(groups_[gi].items);
      groups_[gi].items.clear();
      for (size_t start = 0; start < items.size(); start += kMaxGroupItems) {
        InspectGroup c;
        c.id = static_cast<int>(groups_.size());
        c.parent = static_cast<int>(gi);
        c.chunk = true;
        c.path = groups_[gi].path + "#" + std::to_string(start / kMaxGroupItems);
        const size_t end = std::min(items.size(), start + kMaxGroupItems);
        c.items.assign(items.begin() + static_cast<long>(start), items.begin() + static_cast<long>(end));
        for (int item : c.items) {
          if (item >= 0) groupOf_[static_cast<size_t>(item)] = c.id;
          else groups_[static_cast<size_t>(~item)].parent = c.id;
        }
        groups_[gi].items.push_back(~c.id);
        groups_.push_back(std::move(c));
      }
    }
  }
  // Totals and labels, children before parents (chunks hold groups made before them).
  auto total = [&](int id, auto& self) -> void {
    InspectGroup& g = groups_[static_cast<size_t>(id)];
    g.totalNodes = 0;
    g.firstNode = static_cast<int>(nodes_.size());
    for (int item : g.items) {
      if (item >= 0) {
        g.totalNodes += 1;
        g.firstNode = std::min(g.firstNode, item);
      } else {
        self(~item, self);
        const InspectGroup& c = groups_[static_cast<size_t>(~item)];
        g.totalNodes += c.totalNodes;
        g.firstNode = std::min(g.firstNode, c.firstNode);
      }
    }
  };
  total(0, total);
  for (InspectGroup& g : groups_) {
    if (!g.chunk || g.totalNodes == 0) continue;
    const std::string& parentPath = groups_[static_cast<size_t>(g.parent)].path;
    std::string parentModule = parentPath.substr(0, parentPath.find('#'));
    g.label = (parentModule.empty() ? std::string() : parentModule + ": ") +
              std::to_string(g.totalNodes) + " nodes from " +
              nodes_[static_cast<size_t>(g.firstNode)].name;
  }
}

InspectGraphPtr buildInspectGraph(const core::Graph& graph, std::string hash) {
  const std::vector<core::NodeRef> nodes = graph.nodes();
  const std::vector<std::string> modules = deriveModulePaths(graph);
  std::unordered_map<const core::Node*, int> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i].get()] = static_cast<int>(i);
  std::vector<InspectNode> out(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const core::Node& n = *nodes[i];
    InspectNode& v = out[i];
    v.name = n.name();
    v.op = core::nodeOpName(n.op());
    if (n.op() == core::NodeOp::kPlaceholder) {
      v.target = n.source();
      v.shortName = n.source();
      v.category = n.source().rfind("self.", 0) == 0 ? OpCategory::kParameter : OpCategory::kInput;
    } else if (n.op() == core::NodeOp::kOutput) {
      v.target = "output";
      v.shortName = "output";
      v.category = OpCategory::kOutput;
    } else {
      v.target = n.opKey();
      const std::string t = n.op() == core::NodeOp::kCallMethod ? n.method() : n.target().qualifiedName();
      v.shortName = baseName(t);
      if (v.shortName.empty()) v.shortName = t;
      v.category = categorizeOp(v.op, t);
    }
    v.modulePath = modules[i];
    v.location = n.meta().location;
    v.userStack = n.meta().userStack;
    v.args = argsText(n);
    v.printed = core::printNode(n);
    fillTensor(v, n.meta());
    std::set<int> seen;
    n.forEachInput([&](const core::NodeRef& in) {
      auto it = index.find(in.get());
      if (it != index.end() && seen.insert(it->second).second) v.inputs.push_back(it->second);
    });
  }
  return InspectGraph::make(std::move(out), std::move(hash));
}

InspectGraphPtr inspectGraphFromJson(const std::string& json) {
  return buildInspectGraph(core::readGraphJson(json), textHash(json));
}

}  // namespace dynamo::gui
