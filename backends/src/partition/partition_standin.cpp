// STAND-IN (branch h-aot only, replaced by backends/src/partition of h-partition): splits a joint
// graph into forward and backward by saving every forward value the backward uses. Nodes that
// depend on a tangent are backward nodes; the others are forward nodes. Both graphs keep only
// what their outputs need, except that forward nodes with no users at all stay (in-place updates
// of inputs). The mode and disabled ops are accepted and ignored: nothing is recomputed.
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "dynamo/backends/partition.h"

namespace dynamo::backends {
namespace {

using core::Arg;
using core::ArgKind;
using core::NodeRef;
using NodeMap = std::unordered_map<const core::Node*, NodeRef>;

Arg remap(const Arg& arg, const NodeMap& map) {
  if (!arg.containsNode()) return arg;
  switch (arg.kind()) {
    case ArgKind::kNode: return Arg::node(map.at(arg.asNode().get()));
    case ArgKind::kSlice: {
      const std::vector<Arg>& p = arg.items();
      return Arg::slice(remap(p[0], map), remap(p[1], map), remap(p[2], map));
    }
    case ArgKind::kDict: {
      std::vector<std::pair<std::string, Arg>> entries;
      for (size_t i = 0; i < arg.items().size(); ++i) entries.emplace_back(arg.keys()[i], remap(arg.items()[i], map));
      return Arg::dict(std::move(entries));
    }
    default: {
      std::vector<Arg> items;
      for (const Arg& item : arg.items()) items.push_back(remap(item, map));
      return arg.kind() == ArgKind::kTuple ? Arg::tuple(std::move(items)) : Arg::list(std::move(items));
    }
  }
}

int64_t dtypeBytes(const std::string& dtype) {
  if (dtype == "torch.float64" || dtype == "torch.int64" || dtype == "torch.complex64") return 8;
  if (dtype == "torch.float16" || dtype == "torch.bfloat16" || dtype == "torch.int16") return 2;
  if (dtype == "torch.bool" || dtype == "torch.uint8" || dtype == "torch.int8") return 1;
  return 4;
}

int64_t bytesOf(const core::Node& n) {
  if (!n.meta().tensor) return 0;
  int64_t count = 1;
  for (int64_t d : n.meta().tensor->shape) count *= d;
  return count * dtypeBytes(n.meta().tensor->dtype);
}

void addCall(core::GraphBuilder& b, const NodeRef& n, NodeMap& map) {
  std::vector<Arg> args;
  for (const Arg& a : n->args()) args.push_back(remap(a, map));
  core::Kwargs kwargs;
  for (const auto& [k, v] : n->kwargs()) kwargs.emplace_back(k, remap(v, map));
  map[n.get()] = n->op() == core::NodeOp::kCallFunction
                     ? b.callFunction(n->target(), std::move(args), std::move(kwargs), n->meta(), n->name())
                     : b.callMethod(n->method(), std::move(args), std::move(kwargs), n->meta(), n->name());
}

}  // namespace

std::string Partition::summary() const {
  std::ostringstream s;
  s << saved.size() << " saved (" << bytesSaved << " bytes), " << recomputed.size() << " recomputed";
  return s.str();
}

Partition partitionJoint(const core::Graph& joint, const JointSignature& sig, const PartitionOptions&) {
  const std::vector<NodeRef>& inputs = joint.inputs();
  DYNAMO_INTERNAL_ASSERT(sig.numPrimals <= inputs.size(), "joint graph has fewer inputs than primals");
  const Arg& out = joint.output()->outputValue();
  DYNAMO_INTERNAL_ASSERT(out.kind() == ArgKind::kTuple && out.items().size() == sig.numFwdOutputs + sig.numPrimals,
                         "joint output is not (forward outputs..., one gradient per primal)");
  std::unordered_set<const core::Node*> tangentDep;
  for (size_t i = sig.numPrimals; i < inputs.size(); ++i) tangentDep.insert(inputs[i].get());
  for (const NodeRef& n : joint.body()) {
    bool dep = false;
    n->forEachInput([&](const NodeRef& in) { dep = dep || tangentDep.count(in.get()) > 0; });
    if (dep) tangentDep.insert(n.get());
  }
  // Backward nodes the gradients need.
  std::unordered_set<const core::Node*> needed;
  std::vector<const core::Node*> stack;
  for (size_t i = sig.numFwdOutputs; i < out.items().size(); ++i)
    out.items()[i].forEachNode([&](const NodeRef& n) { stack.push_back(n.get()); });
  std::vector<NodeRef> savedNodes;
  std::unordered_set<const core::Node*> savedSet;
  while (!stack.empty()) {
    const core::Node* n = stack.back();
    stack.pop_back();
    if (!needed.insert(n).second) continue;
    n->forEachInput([&](const NodeRef& in) {
      if (tangentDep.count(in.get())) stack.push_back(in.get());
    });
  }
  // Forward values the needed backward nodes read (and forward values output as gradients).
  auto noteSaved = [&](const NodeRef& in) {
    if (!tangentDep.count(in.get()) && savedSet.insert(in.get()).second) savedNodes.push_back(in);
  };
  for (const NodeRef& n : joint.body())
    if (needed.count(n.get())) n->forEachInput(noteSaved);
  for (size_t i = sig.numFwdOutputs; i < out.items().size(); ++i) out.items()[i].forEachNode(noteSaved);

  std::vector<std::string> saved;
  int64_t bytesSaved = 0;
  // Forward: primals -> every non-tangent node (the runner frees what nobody uses).
  core::GraphBuilder fb;
  NodeMap fmap;
  for (size_t i = 0; i < sig.numPrimals; ++i)
    fmap[inputs[i].get()] = fb.placeholder(inputs[i]->source(), inputs[i]->meta(), inputs[i]->name());
  for (const NodeRef& n : joint.body())
    if (!tangentDep.count(n.get())) addCall(fb, n, fmap);
  std::vector<Arg> fouts;
  for (size_t i = 0; i < sig.numFwdOutputs; ++i) fouts.push_back(remap(out.items()[i], fmap));
  for (const NodeRef& s : savedNodes) {
    fouts.push_back(Arg::node(fmap.at(s.get())));
    saved.push_back(s->name());
    bytesSaved += bytesOf(*s);
  }
  fb.output(Arg::tuple(std::move(fouts)));
  core::Graph forward = fb.build();
  // Backward: saved values, tangents -> gradients.
  core::GraphBuilder bb;
  NodeMap bmap;
  for (const NodeRef& s : savedNodes) bmap[s.get()] = bb.placeholder(s->name(), s->meta(), s->name());
  for (size_t i = sig.numPrimals; i < inputs.size(); ++i)
    bmap[inputs[i].get()] = bb.placeholder(inputs[i]->source(), inputs[i]->meta(), inputs[i]->name());
  for (const NodeRef& n : joint.body())
    if (needed.count(n.get())) addCall(bb, n, bmap);
  std::vector<Arg> bouts;
  for (size_t i = sig.numFwdOutputs; i < out.items().size(); ++i) bouts.push_back(remap(out.items()[i], bmap));
  bb.output(Arg::tuple(std::move(bouts)));
  return Partition{forward, bb.build(), std::move(saved), {}, bytesSaved};
}

}  // namespace dynamo::backends
