// The graph IR: an immutable Graph of nodes, and the GraphBuilder that makes one.
//
// The symbolic interpreter records the PyTorch operations of a user function into a
// GraphBuilder (append-only, the only mutable piece), then freezes it with build(). A Graph is a
// cheap, shareable handle to immutable data: inputs (placeholders, in order), body (calls, in
// order) and the output node. Passes make new graphs (GraphBuilder(graph) starts from one).
// Around it: graph_printer.h (text), graph_serializer.h (JSON for the trace store, and the C++
// reader that needs no Python),
// graph_fx.h (torch.fx.GraphModule) and graph_runner.h (the eager executor).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dynamo/core/graph_arg.h"
#include "dynamo/core/graph_node.h"

namespace dynamo::core {

/// An immutable graph. Copying a Graph copies a handle, not the nodes.
class Graph {
 public:
  /// Placeholders, in input order.
  const std::vector<NodeRef>& inputs() const;
  /// call_function / call_method nodes, in execution order.
  const std::vector<NodeRef>& body() const;
  /// The output node.
  const NodeRef& output() const;
  /// Every node in order: inputs, body, output.
  std::vector<NodeRef> nodes() const;
  /// Number of nodes, output included.
  size_t size() const;
  /// The node named `name`, or null.
  NodeRef find(const std::string& name) const;
  /// Count of call nodes by Node::opKey() ("torch.add" -> 2), sorted by key.
  std::map<std::string, int> opCounts() const;
  /// The nodes that use n (as an argument, keyword argument or in the output structure), each
  /// once, in graph order; empty for a node that nobody uses or that is not in this graph.
  /// Computed once, when the graph is built.
  const std::vector<NodeRef>& users(const Node& n) const;
  /// users(*n).
  const std::vector<NodeRef>& users(const NodeRef& n) const { return users(*n); }

 private:
  friend class GraphBuilder;
  struct Data;
  explicit Graph(std::shared_ptr<const Data> data) : data_(std::move(data)) {}
  std::shared_ptr<const Data> data_;
};

/// Makes a Graph, one node at a time. Node names are made unique the way torch.fx does it
/// ("add", "add_1", ...; never a Python keyword or builtin name), so they survive to_fx.
class GraphBuilder {
 public:
  GraphBuilder();
  /// Starts from base's inputs and body (not its output), to make a new graph from it.
  explicit GraphBuilder(const Graph& base);

  /// Adds a graph input. Inputs are kept in the order added and always precede the body, even
  /// when added after calls. The name comes from nameHint, or the source ("self.w" -> "self_w").
  NodeRef placeholder(std::string source, NodeMeta meta = {}, std::string nameHint = {});
  /// Adds target(*args, **kwargs); named after the target ("add") unless nameHint is given.
  NodeRef callFunction(Target target, std::vector<Arg> args, Kwargs kwargs = {},
                       NodeMeta meta = {}, std::string nameHint = {});
  /// Adds args[0].method(*args[1:], **kwargs); named after the method unless nameHint is given.
  NodeRef callMethod(std::string method, std::vector<Arg> args, Kwargs kwargs = {},
                     NodeMeta meta = {}, std::string nameHint = {});
  /// Sets the output structure. Must be called exactly once, after the last call node.
  void output(Arg value, NodeMeta meta = {});
  /// Freezes the current state into a Graph. The builder stays usable; later additions do not
  /// change graphs already built. User error when no output was set.
  Graph build() const;

  /// Nodes added so far (inputs and body).
  size_t size() const { return inputs_.size() + body_.size(); }
  /// Call nodes added so far (the body, in program order).
  size_t bodySize() const { return body_.size(); }

 private:
  std::string uniqueName(const std::string& candidate);
  void checkArgs(const std::vector<Arg>& args, const Kwargs& kwargs) const;
  void checkNoOutput(const char* what) const;
  NodeRef add(NodeRef node, bool isInput);

  std::vector<NodeRef> inputs_;
  std::vector<NodeRef> body_;
  NodeRef output_;
  std::unordered_set<const Node*> members_;
  std::unordered_map<std::string, int> usedNames_;
};

}  // namespace dynamo::core
