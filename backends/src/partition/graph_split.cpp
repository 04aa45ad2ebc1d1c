// Forward/backward classification and graph building of the partitioner (graph_split.h).
#include "partition/graph_split.h"

#include <algorithm>

#include "partition/recompute_rules.h"

namespace dynamo::backends::partition {
namespace {

using core::Arg;
using core::ArgKind;
using core::NodeRef;
using NodeMap = std::unordered_map<const core::Node*, NodeRef>;

Arg remap(const Arg& arg, const NodeMap& map) {
  if (!arg.containsNode()) return arg;
  switch (arg.kind()) {
    case ArgKind::kNode: {
      auto it = map.find(arg.asNode().get());
      DYNAMO_INTERNAL_ASSERT(it != map.end(), "partition: '", arg.asNode()->name(), "' missing from its graph");
      return Arg::node(it->second);
    }
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

void addCall(core::GraphBuilder& b, const NodeRef& n, NodeMap& map) {
  std::vector<Arg> args;
  for (const Arg& a : n->args()) args.push_back(remap(a, map));
  core::Kwargs kwargs;
  for (const auto& [k, v] : n->kwargs()) kwargs.emplace_back(k, remap(v, map));
  map[n.get()] = n->op() == core::NodeOp::kCallFunction
                     ? b.callFunction(n->target(), std::move(args), std::move(kwargs), n->meta(), n->name())
                     : b.callMethod(n->method(), std::move(args), std::move(kwargs), n->meta(), n->name());
}

/// Forward nodes the forward graph must run: what its outputs and saved values need, and every
/// side effect (mutating nodes, random nodes, nodes nobody uses), with their inputs.
NodeSet forwardKeep(const JointView& view, const core::Graph& joint, const std::vector<NodeRef>& saved) {
  std::vector<const core::Node*> stack;
  for (const Arg& a : view.forwardOutputs) a.forEachNode([&](const NodeRef& n) { stack.push_back(n.get()); });
  for (const NodeRef& s : saved) stack.push_back(s.get());
  for (const NodeRef& n : view.forwardNodes)
    if (n->op() != core::NodeOp::kPlaceholder && (isMutating(*n) || isRandom(*n) || joint.users(n).empty()))
      stack.push_back(n.get());
  NodeSet keep;
  while (!stack.empty()) {
    const core::Node* n = stack.back();
    stack.pop_back();
    if (!keep.insert(n).second) continue;
    n->forEachInput([&](const NodeRef& in) { stack.push_back(in.get()); });
  }
  return keep;
}

}  // namespace

JointView classifyJoint(const core::Graph& joint, const JointSignature& sig) {
  JointView v;
  const std::vector<NodeRef>& inputs = joint.inputs();
  DYNAMO_INTERNAL_ASSERT(sig.numPrimals <= inputs.size(), "partition: the joint graph has ", inputs.size(),
                         " inputs, fewer than its ", sig.numPrimals, " primals");
  const Arg& out = joint.output()->outputValue();
  DYNAMO_INTERNAL_ASSERT(out.kind() == ArgKind::kTuple && out.items().size() == sig.numFwdOutputs + sig.numPrimals,
                         "partition: the joint output is not (", sig.numFwdOutputs, " forward outputs, ",
                         sig.numPrimals, " gradients)");
  v.primals.assign(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(sig.numPrimals));
  v.tangents.assign(inputs.begin() + static_cast<std::ptrdiff_t>(sig.numPrimals), inputs.end());
  v.forwardNodes = v.primals;
  for (const NodeRef& t : v.tangents) v.backwardSet.insert(t.get());
  for (const NodeRef& n : joint.body()) {
    bool dep = false;
    n->forEachInput([&](const NodeRef& in) { dep = dep || v.backwardSet.count(in.get()) > 0; });
    if (dep) {
      v.backwardSet.insert(n.get());
    } else {
      v.forwardNodes.push_back(n);
    }
  }
  v.forwardOutputs.assign(out.items().begin(), out.items().begin() + static_cast<std::ptrdiff_t>(sig.numFwdOutputs));
  v.gradients.assign(out.items().begin() + static_cast<std::ptrdiff_t>(sig.numFwdOutputs), out.items().end());

  NodeSet needed;
  NodeSet reads;
  std::vector<const core::Node*> stack;
  for (const Arg& g : v.gradients) g.forEachNode([&](const NodeRef& n) { stack.push_back(n.get()); });
  while (!stack.empty()) {
    const core::Node* n = stack.back();
    stack.pop_back();
    if (!v.backwardSet.count(n)) {
      reads.insert(n);
      continue;
    }
    if (!needed.insert(n).second) continue;
    n->forEachInput([&](const NodeRef& in) { stack.push_back(in.get()); });
  }
  for (const NodeRef& n : joint.body())
    if (needed.count(n.get())) v.neededBackward.push_back(n);
  for (const NodeRef& n : v.forwardNodes)
    if (reads.count(n.get())) v.backwardReads.push_back(n);
  return v;
}

std::pair<core::Graph, core::Graph> buildGraphs(const core::Graph& joint, const JointView& view,
                                                std::vector<NodeRef>& saved, const NodeSet& recomputed) {
  std::stable_partition(saved.begin(), saved.end(), [](const NodeRef& n) { return !isSymbolicInt(*n); });
  NodeSet keep = forwardKeep(view, joint, saved);

  core::GraphBuilder fb;
  NodeMap fmap;
  for (const NodeRef& p : view.primals) fmap[p.get()] = fb.placeholder(p->source(), p->meta(), p->name());
  for (const NodeRef& n : view.forwardNodes)
    if (n->op() != core::NodeOp::kPlaceholder && keep.count(n.get())) addCall(fb, n, fmap);
  std::vector<Arg> fouts;
  for (const Arg& a : view.forwardOutputs) fouts.push_back(remap(a, fmap));
  for (const NodeRef& s : saved) fouts.push_back(Arg::node(fmap.at(s.get())));
  fb.output(Arg::tuple(std::move(fouts)));
  core::Graph forward = fb.build();

  core::GraphBuilder bb;
  NodeMap bmap;
  for (const NodeRef& s : saved) bmap[s.get()] = bb.placeholder(s->name(), s->meta(), s->name());
  for (const NodeRef& t : view.tangents) bmap[t.get()] = bb.placeholder(t->source(), t->meta(), t->name());
  // Recomputed nodes read only saved values and each other, so they all go first.
  for (const NodeRef& n : view.forwardNodes)
    if (recomputed.count(n.get())) addCall(bb, n, bmap);
  for (const NodeRef& n : view.neededBackward) addCall(bb, n, bmap);
  std::vector<Arg> bouts;
  for (const Arg& g : view.gradients) bouts.push_back(remap(g, bmap));
  bb.output(Arg::tuple(std::move(bouts)));
  return {forward, bb.build()};
}

}  // namespace dynamo::backends::partition
