// GraphRewriter (see passes.h): a new graph made of copies of a base graph's nodes.
#include <utility>

#include "dynamo/common/error.h"
#include "dynamo/core/passes.h"

namespace dynamo::core {

GraphRewriter::GraphRewriter(const Graph& base, std::function<NodeMeta(const Node&)> metaFn)
    : base_(base), metaOf_(std::move(metaFn)) {
  // Inputs are always kept, in order and under the same names: the graph's callers pass them
  // positionally.
  for (const NodeRef& in : base.inputs())
    copies_[in.get()] = builder_.placeholder(in->source(), metaOf(*in), in->name());
}

Arg GraphRewriter::remap(const Arg& a) const {
  if (!a.containsNode()) return a;
  if (a.isNode()) {
    auto it = copies_.find(a.asNode().get());
    DYNAMO_INTERNAL_ASSERT(it != copies_.end(), "GraphRewriter: node '", a.asNode()->name(),
                           "' is used but was not kept");
    return Arg::node(it->second);
  }
  std::vector<Arg> items;
  for (const Arg& item : a.items()) items.push_back(remap(item));
  switch (a.kind()) {
    case ArgKind::kTuple: return Arg::tuple(std::move(items));
    case ArgKind::kList: return Arg::list(std::move(items));
    case ArgKind::kSlice: return Arg::slice(items[0], items[1], items[2]);
    case ArgKind::kDict: {
      std::vector<std::pair<std::string, Arg>> entries;
      for (size_t i = 0; i < items.size(); ++i) entries.emplace_back(a.keys()[i], std::move(items[i]));
      return Arg::dict(std::move(entries));
    }
    default: DYNAMO_INTERNAL_ASSERT(false, "GraphRewriter: unexpected container kind");
  }
  return a;
}

NodeRef GraphRewriter::copy(const NodeRef& n) {
  std::vector<Arg> args;
  for (const Arg& a : n->args()) args.push_back(remap(a));
  Kwargs kwargs;
  for (const auto& [k, v] : n->kwargs()) kwargs.emplace_back(k, remap(v));
  NodeRef made = n->op() == NodeOp::kCallMethod
                     ? builder_.callMethod(n->method(), std::move(args), std::move(kwargs), metaOf(*n), n->name())
                     : builder_.callFunction(n->target(), std::move(args), std::move(kwargs), metaOf(*n), n->name());
  copies_[n.get()] = made;
  return made;
}

Graph GraphRewriter::finish() {
  builder_.output(remap(base_.output()->outputValue()), base_.output()->meta());
  return builder_.build();
}

}  // namespace dynamo::core
