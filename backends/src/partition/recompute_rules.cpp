// Recompute rules and value sizes for the min-cut partitioner (recompute_rules.h).
#include "partition/recompute_rules.h"

#include <algorithm>
#include <unordered_set>

namespace dynamo::backends::partition {
namespace {

const std::unordered_set<std::string>& listedSet() {
  static const std::unordered_set<std::string> set(recomputeOpNames().begin(), recomputeOpNames().end());
  return set;
}

/// "aten::add_.Tensor" -> "add_".
std::string baseName(const std::string& schema) {
  size_t start = schema.find("::");
  start = start == std::string::npos ? 0 : start + 2;
  size_t dot = schema.find('.', start);
  return schema.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
}

int64_t dtypeBytes(const std::string& dtype) {
  static const std::pair<const char*, int64_t> kSizes[] = {
      {"torch.float64", 8}, {"torch.int64", 8},    {"torch.complex64", 8}, {"torch.complex128", 16},
      {"torch.float32", 4}, {"torch.int32", 4},    {"torch.float16", 2},   {"torch.bfloat16", 2},
      {"torch.int16", 2},   {"torch.bool", 1},     {"torch.uint8", 1},     {"torch.int8", 1}};
  for (const auto& [name, size] : kSizes)
    if (dtype == name) return size;
  return 8;  // unknown dtype: assume the widest common one
}

}  // namespace

const std::vector<std::string>& recomputeOpNames() {
  static const std::vector<std::string> names = {
#define DYNAMO_RECOMPUTE_OP(schema, group) schema,
#include "partition/recompute_ops.def"
  };
  return names;
}

bool recomputeListed(const core::Node& n, const std::vector<std::string>& disabled) {
  if (n.op() != core::NodeOp::kCallFunction || n.target().kind() != core::TargetKind::kAtenOp) {
    return isSymbolicInt(n);  // operator.mul on sizes and the like
  }
  const std::string& schema = n.target().schemaName();
  if (!listedSet().count(schema) || isRandom(n)) return false;
  return std::find(disabled.begin(), disabled.end(), schema) == disabled.end();
}

bool fusible(const core::Node& n) {
  if (n.op() != core::NodeOp::kCallFunction || n.target().kind() != core::TargetKind::kAtenOp) {
    return isSymbolicInt(n);
  }
  static const std::unordered_set<std::string> kFusible = [] {
    std::unordered_set<std::string> set;
#define DYNAMO_RECOMPUTE_OP(schema, group) \
  if (std::string(#group) != "view") set.insert(schema);
#include "partition/recompute_ops.def"
    return set;
  }();
  return kFusible.count(n.target().schemaName()) > 0;
}

bool isMutating(const core::Node& n) {
  if (n.op() == core::NodeOp::kCallMethod) return !n.method().empty() && n.method().back() == '_';
  if (n.op() != core::NodeOp::kCallFunction) return false;
  const core::Target& t = n.target();
  if (t.kind() == core::TargetKind::kAtenOp) {
    std::string base = baseName(t.schemaName());
    if (!base.empty() && base.back() == '_' && base.front() != '_') return true;
    for (const auto& kv : n.kwargs())
      if (kv.first == "out") return true;
    return false;
  }
  if (t.kind() == core::TargetKind::kMethod) return !t.method().empty() && t.method().back() == '_';
  return false;
}

bool isRandom(const core::Node& n) {
  if (n.op() == core::NodeOp::kCallMethod) return false;
  if (n.op() != core::NodeOp::kCallFunction || n.target().kind() != core::TargetKind::kAtenOp) return false;
  static const std::unordered_set<std::string> kRandom = {
#define DYNAMO_RANDOM_OP(name) name,
#include "partition/random_ops.def"
  };
  return kRandom.count(baseName(n.target().schemaName())) > 0;
}

bool isView(const core::Node& n) {
  if (n.op() != core::NodeOp::kCallFunction || n.target().kind() != core::TargetKind::kAtenOp) return false;
  static const std::unordered_set<std::string> kViews = {
      "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "squeeze", "unsqueeze",
      "slice", "select", "alias", "detach", "as_strided", "diagonal", "unfold", "split", "chunk",
      "narrow", "view_as", "expand_as", "unbind", "split_with_sizes", "_reshape_alias", "flatten"};
  return kViews.count(baseName(n.target().schemaName())) > 0;
}

std::optional<int64_t> tensorBytes(const core::Node& n) {
  if (!n.meta().tensor) return std::nullopt;
  int64_t count = 1;
  for (int64_t d : n.meta().tensor->shape) count *= std::max<int64_t>(d, 0);
  return count * dtypeBytes(n.meta().tensor->dtype);
}

bool isSymbolicInt(const core::Node& n) {
  if (n.meta().tensor || n.op() != core::NodeOp::kCallFunction) return false;
  const core::Target& t = n.target();
  if (t.kind() == core::TargetKind::kAtenOp) return t.schemaName().rfind("aten::sym_", 0) == 0;
  if (t.qualifiedName().rfind("operator.", 0) != 0) return false;
  if (t.qualifiedName() == "operator.getitem") return false;
  bool allInts = true;
  n.forEachInput([&](const core::NodeRef& in) { allInts = allInts && isSymbolicInt(*in); });
  return allInts;
}

}  // namespace dynamo::backends::partition
