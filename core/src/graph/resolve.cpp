// resolveTargets (graph_python.h): gives the targets of a graph read back from JSON their live
// callables, so the graph can run. The new graph has the same names, arguments and meta.
#include <unordered_map>

#include "dynamo/core/graph_python.h"

namespace dynamo::core {
namespace {

using NodeMap = std::unordered_map<const Node*, NodeRef>;

// arg with every node reference replaced by its counterpart in the new graph.
Arg remapArg(const Arg& arg, const NodeMap& map) {
  if (!arg.containsNode()) return arg;
  switch (arg.kind()) {
    case ArgKind::kNode: return Arg::node(map.at(arg.asNode().get()));
    case ArgKind::kSlice: {
      const std::vector<Arg>& p = arg.items();
      return Arg::slice(remapArg(p[0], map), remapArg(p[1], map), remapArg(p[2], map));
    }
    case ArgKind::kDict: {
      std::vector<std::pair<std::string, Arg>> entries;
      for (size_t i = 0; i < arg.items().size(); ++i) {
        entries.emplace_back(arg.keys()[i], remapArg(arg.items()[i], map));
      }
      return Arg::dict(std::move(entries));
    }
    default: {
      std::vector<Arg> items;
      for (const Arg& item : arg.items()) items.push_back(remapArg(item, map));
      return arg.kind() == ArgKind::kTuple ? Arg::tuple(std::move(items))
                                           : Arg::list(std::move(items));
    }
  }
}

std::vector<Arg> remapArgs(const std::vector<Arg>& args, const NodeMap& map) {
  std::vector<Arg> out;
  out.reserve(args.size());
  for (const Arg& a : args) out.push_back(remapArg(a, map));
  return out;
}

Kwargs remapKwargs(const Kwargs& kwargs, const NodeMap& map) {
  Kwargs out;
  for (const auto& [key, value] : kwargs) out.emplace_back(key, remapArg(value, map));
  return out;
}

Target resolved(const Node& n) {
  const Target& t = n.target();
  if (t.hasCallable()) return t;
  PyObjectRef callable = resolveQualifiedName(t.qualifiedName());
  DYNAMO_USER_CHECK(callable, UserErrorKind::kInvalidArgument, "cannot resolve call target '",
                    t.qualifiedName(), "' of node '", n.name(), "': no such module or attribute "
                    "in this Python environment",
                    t.resolvable() ? "" : " (it was not resolvable when the graph was captured)");
  return t.withCallable(std::move(callable));
}

}  // namespace

Graph resolveTargets(const Graph& graph) {
  GraphBuilder b;
  NodeMap map;
  for (const NodeRef& n : graph.inputs()) {
    map[n.get()] = b.placeholder(n->source(), n->meta(), n->name());
  }
  for (const NodeRef& n : graph.body()) {
    std::vector<Arg> args = remapArgs(n->args(), map);
    Kwargs kwargs = remapKwargs(n->kwargs(), map);
    map[n.get()] = n->op() == NodeOp::kCallFunction
                       ? b.callFunction(resolved(*n), std::move(args), std::move(kwargs),
                                        n->meta(), n->name())
                       : b.callMethod(n->method(), std::move(args), std::move(kwargs),
                                      n->meta(), n->name());
  }
  b.output(remapArg(graph.output()->outputValue(), map), graph.output()->meta());
  return b.build();
}

}  // namespace dynamo::core
