// partitionJoint (dynamo/backends/partition.h): classifies the joint graph, chooses the saved
// values (all backward reads for kSaveAll; a minimum cut for kMinCut) and builds the two graphs.
//
// The min-cut network (one split node per forward value v, in_v -> out_v):
//
//   source --inf--> in_v          v is a primal or may not be recomputed (must be computed in
//                                 the forward; cutting in_v -> out_v saves it)
//   in_v --weight(v)--> out_v     the cost of saving v
//   out_u --inf--> in_v           u is an input of v (both forward nodes)
//   out_v --inf--> sink           the backward reads v directly
//
// A finite cut separates every backward read from the source; the cut edges are exactly the
// in -> out edges of the saved values, and every forward node on the sink side that the backward
// needs is recomputed there. weight(v) = bytes(v) * 1.1^clamp(dist(v), 1, 100), dist being the number
// of edges from v to the nearest backward node (primals count as dist 1; docs/partitioner.md).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "dynamo/backends/partition.h"
#include "partition/graph_split.h"
#include "partition/max_flow.h"
#include "partition/recompute_rules.h"

namespace dynamo::backends {
namespace {

using core::NodeRef;
using partition::JointView;
using partition::NodeSet;

int64_t savedBytes(const core::Node& n) {
  if (partition::isSymbolicInt(n)) return 0;
  return partition::tensorBytes(n).value_or(0);
}

/// Nodes whose value may change after they run: arguments of mutating ops and everything that
/// aliases them through view ops.
NodeSet mutatedAliases(const core::Graph& joint) {
  NodeSet mutated;
  for (const NodeRef& n : joint.body())
    if (partition::isMutating(*n)) {
      if (!n->args().empty()) n->args()[0].forEachNode([&](const NodeRef& in) { mutated.insert(in.get()); });
      for (const auto& [key, value] : n->kwargs())
        if (key == "out") value.forEachNode([&](const NodeRef& in) { mutated.insert(in.get()); });
    }
  if (mutated.empty()) return mutated;
  bool changed = true;
  while (changed) {  // views of, and bases of views of, mutated values
    changed = false;
    for (const NodeRef& n : joint.body()) {
      if (!partition::isView(*n) || n->args().empty() || !n->args()[0].isNode()) continue;
      const core::Node* base = n->args()[0].asNode().get();
      bool b = mutated.count(base) > 0, v = mutated.count(n.get()) > 0;
      if (b != v) {
        mutated.insert(b ? n.get() : base);
        changed = true;
      }
    }
  }
  return mutated;
}

/// Forward values (views excepted) that a backward op outside the recompute list's pointwise and
/// reduction groups reads, directly or through view ops: mm, convolution_backward, a batch
/// norm backward and the like. Such an op needs the value in memory, so recomputing it in the
/// backward is never free: it costs a full pass and a buffer there, where saving it costs only
/// the buffer (the forward made it anyway). The MLP step's gelu output, which the backward's
/// weight-gradient mm reads, was recomputed by an erf pass over 256x4096 floats per step.
NodeSet materializedInBackward(const core::Graph& joint, const JointView& view) {
  NodeSet out;
  for (const NodeRef& v : view.forwardNodes) {
    if (v->op() == core::NodeOp::kPlaceholder || partition::isView(*v)) continue;
    std::vector<NodeRef> walk{v};
    NodeSet seen{v.get()};
    bool materialized = false;
    while (!walk.empty() && !materialized) {
      NodeRef cur = walk.back();
      walk.pop_back();
      for (const NodeRef& user : joint.users(cur)) {
        if (view.backwardSet.count(user.get()) && !partition::fusible(*user)) {
          materialized = true;
          break;
        }
        if (partition::isView(*user) && seen.insert(user.get()).second) walk.push_back(user);
      }
    }
    if (materialized) out.insert(v.get());
  }
  return out;
}

/// True when v must not be recomputed in the backward.
bool banned(const core::Graph& joint, const NodeRef& v, const PartitionOptions& opts, const NodeSet& mutated,
            const NodeSet& materialized) {
  if (v->op() == core::NodeOp::kPlaceholder) return true;
  if (!partition::recomputeListed(*v, opts.disabledRecomputeOps)) return true;
  if (mutated.count(v.get()) || materialized.count(v.get())) return true;
  bool readsMutated = false;
  int64_t inputBytes = 0;
  v->forEachInput([&](const NodeRef& in) {
    readsMutated = readsMutated || mutated.count(in.get()) > 0;
    inputBytes += partition::tensorBytes(*in).value_or(0);
  });
  if (readsMutated) return true;
  std::optional<int64_t> outBytes = partition::tensorBytes(*v);
  (void)joint;
  return outBytes && inputBytes > *outBytes * 4;  // a big reduction: saving its result is cheaper
}

/// The capacity of v's in -> out edge: kWeightScale * bytes * 1.1^clamp(dist, 1, 100). A primal
/// is alive for the whole step anyway, so it counts as if next to the backward (dist 1) and wins
/// ties (one unit less) against the values computed from it.
int64_t nodeWeight(const core::Node& v, int64_t bytes, int dist) {
  constexpr double kWeightScale = 16;  // keeps rounding far below one byte's weight
  bool primal = v.op() == core::NodeOp::kPlaceholder;
  int d = primal ? 1 : std::clamp(dist, 1, 100);
  auto weight = static_cast<int64_t>(std::llround(kWeightScale * static_cast<double>(bytes) * std::pow(1.1, d)));
  return std::max<int64_t>(primal ? weight - 1 : weight, 1);
}

std::vector<NodeRef> minCutSaved(const core::Graph& joint, const JointView& view, const PartitionOptions& opts) {
  const std::vector<NodeRef>& fwd = view.forwardNodes;
  const int n = static_cast<int>(fwd.size());
  std::unordered_map<const core::Node*, int> index;
  for (int i = 0; i < n; ++i) index[fwd[i].get()] = i;
  // Distance to the backward, from the last forward node up.
  constexpr int kFar = 100;
  std::vector<int> dist(n, kFar);
  for (const NodeRef& r : view.backwardReads) dist[index.at(r.get())] = 1;  // gradients too
  for (int i = n - 1; i >= 0; --i)
    for (const NodeRef& user : joint.users(fwd[i])) {
      if (view.backwardSet.count(user.get())) {
        dist[i] = std::min(dist[i], 1);
      } else if (auto it = index.find(user.get()); it != index.end()) {
        dist[i] = std::min(dist[i], dist[it->second] + 1);
      }
    }
  NodeSet mutated = mutatedAliases(joint);
  NodeSet materialized = materializedInBackward(joint, view);
  const int source = 2 * n, sink = 2 * n + 1;
  partition::MaxFlow flow(2 * n + 2);
  for (int i = 0; i < n; ++i) {
    const core::Node& v = *fwd[i];
    int64_t bytes = partition::isSymbolicInt(v) ? partition::kSymIntBytes
                                                : partition::tensorBytes(v).value_or(partition::kUnknownBytes);
    flow.addEdge(2 * i, 2 * i + 1, nodeWeight(v, bytes, dist[i]));
    if (banned(joint, fwd[i], opts, mutated, materialized)) flow.addEdge(source, 2 * i, partition::kInfinite);
    v.forEachInput([&](const NodeRef& in) {
      if (auto it = index.find(in.get()); it != index.end()) flow.addEdge(2 * it->second + 1, 2 * i, partition::kInfinite);
    });
  }
  for (const NodeRef& r : view.backwardReads) flow.addEdge(2 * index.at(r.get()) + 1, sink, partition::kInfinite);
  flow.solve(source, sink);
  std::vector<NodeRef> saved;
  for (int i = 0; i < n; ++i)
    if (flow.sourceSide()[2 * i] && !flow.sourceSide()[2 * i + 1]) saved.push_back(fwd[i]);
  return saved;
}

/// The forward nodes the backward recomputes: what its reads need, stopping at saved values.
/// A banned node reached here (never, for a correct cut) is saved instead.
NodeSet recomputeSet(const core::Graph& joint, const JointView& view, std::vector<NodeRef>& saved,
                     const PartitionOptions& opts) {
  NodeSet savedSet;
  for (const NodeRef& s : saved) savedSet.insert(s.get());
  NodeSet mutated = mutatedAliases(joint);
  NodeSet materialized = materializedInBackward(joint, view);
  NodeSet recomputed;
  std::vector<NodeRef> stack(view.backwardReads.rbegin(), view.backwardReads.rend());
  while (!stack.empty()) {
    NodeRef v = stack.back();
    stack.pop_back();
    if (savedSet.count(v.get()) || recomputed.count(v.get())) continue;
    if (banned(joint, v, opts, mutated, materialized)) {
      savedSet.insert(v.get());
      saved.push_back(v);
      continue;
    }
    recomputed.insert(v.get());
    v->forEachInput([&](const NodeRef& in) { stack.push_back(in); });
  }
  return recomputed;
}

}  // namespace

std::string Partition::summary() const {
  std::ostringstream s;
  s << saved.size() << " saved (" << bytesSaved << " bytes), " << recomputed.size() << " recomputed";
  return s.str();
}

Partition partitionJoint(const core::Graph& joint, const JointSignature& sig, const PartitionOptions& opts) {
  JointView view = partition::classifyJoint(joint, sig);
  std::vector<NodeRef> saved;
  NodeSet recomputed;
  if (opts.mode == PartitionMode::kSaveAll) {
    saved = view.backwardReads;
  } else {
    saved = minCutSaved(joint, view, opts);
    recomputed = recomputeSet(joint, view, saved, opts);
  }
  // Graph order for the saved values (buildGraphs then puts the symbolic ints last).
  std::unordered_map<const core::Node*, size_t> order;
  for (size_t i = 0; i < view.forwardNodes.size(); ++i) order[view.forwardNodes[i].get()] = i;
  std::sort(saved.begin(), saved.end(), [&](const NodeRef& a, const NodeRef& b) { return order.at(a.get()) < order.at(b.get()); });
  auto [forward, backward] = partition::buildGraphs(joint, view, saved, recomputed);
  Partition p{forward, backward, {}, {}, 0};
  for (const NodeRef& s : saved) {
    p.saved.push_back(s->name());
    p.bytesSaved += savedBytes(*s);
  }
  for (const NodeRef& n : view.forwardNodes)
    if (recomputed.count(n.get())) p.recomputed.push_back(n->name());
  return p;
}

}  // namespace dynamo::backends
