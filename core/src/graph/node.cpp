// Node: the static make*() functions and accessors of immutable graph nodes (graph_node.h).
#include "dynamo/core/graph_node.h"

#include "dynamo/common/op_key.h"

namespace dynamo::core {

const char* nodeOpName(NodeOp op) {
  switch (op) {
    case NodeOp::kPlaceholder: return "placeholder";
    case NodeOp::kCallFunction: return "call_function";
    case NodeOp::kCallMethod: return "call_method";
    case NodeOp::kOutput: return "output";
  }
  return "?";
}

NodeRef Node::makePlaceholder(std::string name, std::string source, NodeMeta meta) {
  DYNAMO_INTERNAL_ASSERT(!name.empty(), "placeholder without a name");
  // Constructor is private: std::make_shared cannot reach it.
  std::shared_ptr<Node> n(new Node(NodeOp::kPlaceholder, std::move(name)));
  n->source_ = std::move(source);
  n->meta_ = std::move(meta);
  return n;
}

NodeRef Node::makeCallFunction(std::string name, Target target, std::vector<Arg> args,
                               Kwargs kwargs, NodeMeta meta) {
  DYNAMO_INTERNAL_ASSERT(!name.empty(), "call_function without a name");
  DYNAMO_INTERNAL_ASSERT(!target.qualifiedName().empty(), "call_function '", name,
                         "' without a target name");
  std::shared_ptr<Node> n(new Node(NodeOp::kCallFunction, std::move(name)));
  n->target_ = std::move(target);
  n->args_ = std::move(args);
  n->kwargs_ = std::move(kwargs);
  n->meta_ = std::move(meta);
  return n;
}

NodeRef Node::makeCallMethod(std::string name, std::string method, std::vector<Arg> args,
                             Kwargs kwargs, NodeMeta meta) {
  DYNAMO_INTERNAL_ASSERT(!name.empty(), "call_method without a name");
  DYNAMO_USER_CHECK(!args.empty(), UserErrorKind::kInvalidArgument, "call_method '", method,
                    "' needs at least one argument (the object the method is called on)");
  std::shared_ptr<Node> n(new Node(NodeOp::kCallMethod, std::move(name)));
  n->method_ = std::move(method);
  n->args_ = std::move(args);
  n->kwargs_ = std::move(kwargs);
  n->meta_ = std::move(meta);
  return n;
}

NodeRef Node::makeOutput(Arg value, NodeMeta meta) {
  std::shared_ptr<Node> n(new Node(NodeOp::kOutput, "output"));
  n->args_.push_back(std::move(value));
  n->meta_ = std::move(meta);
  return n;
}

const Target& Node::target() const {
  DYNAMO_INTERNAL_ASSERT(op_ == NodeOp::kCallFunction, "target() of ", nodeOpName(op_),
                         " node '", name_, "'");
  return *target_;
}

const std::string& Node::method() const {
  DYNAMO_INTERNAL_ASSERT(op_ == NodeOp::kCallMethod, "method() of ", nodeOpName(op_), " node '",
                         name_, "'");
  return method_;
}

const Arg& Node::outputValue() const {
  DYNAMO_INTERNAL_ASSERT(op_ == NodeOp::kOutput && args_.size() == 1,
                         "outputValue() of ", nodeOpName(op_), " node '", name_, "'");
  return args_.front();
}

std::string Node::opKey() const {
  switch (op_) {
    case NodeOp::kCallFunction: return graphOpKey("call_function", target_->qualifiedName());
    case NodeOp::kCallMethod: return graphOpKey("call_method", method_);
    default: return nodeOpName(op_);
  }
}

}  // namespace dynamo::core
