// Nodes of the graph IR: immutable, ref-counted, made only through the static make*() functions.
//
// A node is one of: a placeholder (a graph input, named after the user source it came from), a
// call_function (a target known by qualified name, with an optional live Python handle), a
// call_method (a method name called on the first argument) or the output (a structure of node
// references). Each node carries a user-visible name, unique in its graph (GraphBuilder assigns
// it), and optional metadata for the explainer and the tools: tensor meta, user location, user
// stack and a stack trace string.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dynamo/common/error.h"
#include "dynamo/core/graph_arg.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::core {

/// The four kinds of node.
enum class NodeOp {
  kPlaceholder,   ///< a graph input
  kCallFunction,  ///< target(*args, **kwargs)
  kCallMethod,    ///< args[0].method(*args[1:], **kwargs)
  kOutput,        ///< the graph's result: args()[0] is the output structure
};

/// "placeholder", "call_function", "call_method" or "output" (FX's op names).
const char* nodeOpName(NodeOp op);

/// How a tensor's elements are laid out in memory (from its strides).
enum class MemoryFormat {
  kContiguous,    ///< row-major (torch.contiguous_format)
  kChannelsLast,  ///< NHWC order of a 4-d tensor (torch.channels_last)
  kOther,         ///< anything else: a transposed view, a strided slice, channels_last_3d, ...
};

/// "contiguous", "channels_last" or "other" (the serializer's spelling).
const char* memoryFormatName(MemoryFormat format);

/// What is known about a node's tensor result. An aggregate: fields may be set one by one.
struct TensorMeta {
  std::vector<int64_t> shape;    ///< sizes, outermost first
  std::string dtype;             ///< qualified dtype name, e.g. "torch.float32"
  std::string device;            ///< str() of the device, e.g. "cpu", "cuda:0"
  bool requiresGrad = false;     ///< the result's requires_grad flag
  std::optional<std::vector<int64_t>> strides;  ///< in elements, parallel to shape; or unknown
  MemoryFormat memoryFormat = MemoryFormat::kContiguous;  ///< meaningful when strides are known
  /// With dynamic dimensions: each size's expression ("s0", "2*s0", "s1 - 1"), "" for a static
  /// size; empty when every size is static (a graph traced without dynamic shapes).
  std::vector<std::string> symShape;

  /// Field-by-field equality.
  bool operator==(const TensorMeta& other) const;
  bool operator!=(const TensorMeta& other) const { return !(*this == other); }
};

/// The tensor meta of a torch.Tensor: shape, strides, memory format, dtype, device and
/// requires_grad (needs the GIL; throws PythonError when an attribute cannot be read).
TensorMeta tensorMetaOf(PyObject* tensor);  // borrowed ref

/// Optional metadata of a node. All parts may be empty.
struct NodeMeta {
  std::optional<TensorMeta> tensor;       ///< the result's tensor meta, when it is a tensor
  SourceLocation location;                ///< the user line that produced this node
  std::vector<SourceLocation> userStack;  ///< user frames, outermost first (for the explainer)
  std::string stackTrace;                 ///< a rendered stack trace, as FX's meta["stack_trace"]
};

/// What a call_function target is, as its qualified name tells.
enum class TargetKind {
  kFunction,  ///< a plain function: "torch.add", "operator.getitem", "torch.nn.functional.relu"
  kMethod,    ///< a torch.Tensor method descriptor: "torch.Tensor.add_" (method "add_")
  kAtenOp,    ///< an ATen operator: "torch.ops.aten.add.Tensor" (schema "aten::add.Tensor")
};

/// "function", "method" or "aten" (the serializer's spelling).
const char* targetKindName(TargetKind kind);

/// The callable of a call_function node: a qualified name that a tool can resolve back to the
/// same object ("torch.add", "operator.getitem", "torch.Tensor.add_",
/// "torch.ops.aten.add.Tensor"), its kind, and an optional live handle to the Python object.
///
/// The name is the target's identity: printing, serializing and comparing use only the name, and
/// copying or destroying a Target never needs the GIL (the handle is shared; its last owner takes
/// the GIL to release the object). The handle is needed only to run the graph; a Target read back
/// from JSON has none until resolveTargets() (graph_python.h) imports it by name.
class Target {
 public:
  /// Names a callable and keeps a live handle to it (needs the GIL; the result is cached per
  /// object). Never fails: a callable whose name cannot be resolved back to it gets a best-effort
  /// name and resolvable() false.
  static Target fromCallable(PyObject* callable);  // borrowed ref
  /// A target with a name given by the caller (the name is trusted, not checked). Needs the GIL
  /// when callable is not null.
  static Target make(PyObjectRef callable, std::string qualifiedName, bool resolvable);
  /// A target known by name only (no live handle): a graph read back from JSON. The kind comes
  /// from the name ("torch.Tensor.<m>" is a method, "torch.ops.<ns>.<op>[.<overload>]" an ATen
  /// op). No Python needed.
  static Target fromName(std::string qualifiedName, bool resolvable = true);
  /// An ATen operator by schema name: "aten::add.Tensor" (overload Tensor), "aten::relu" (the
  /// default overload, qualified name "torch.ops.aten.relu.default"). No Python needed.
  static Target atenOp(const std::string& schemaName);

  /// The live callable (borrowed from this target), or null when the target is known by name only.
  PyObject* callable() const { return handle_.get(); }
  /// True when the target has a live callable (it can run).
  bool hasCallable() const { return handle_ != nullptr; }
  /// The same target with a live callable (needs the GIL when callable is not null).
  Target withCallable(PyObjectRef callable) const;

  /// "torch.add", "torch.nn.functional.relu", "operator.getitem", "torch.Tensor.add_",
  /// "torch.ops.aten.add.Tensor".
  const std::string& qualifiedName() const { return qualifiedName_; }
  /// function, method or ATen op.
  TargetKind kind() const { return kind_; }
  /// kMethod: the method name ("add_"); empty for other kinds.
  const std::string& method() const { return method_; }
  /// kAtenOp: "aten::add.Tensor", or "aten::relu" for the default overload (and for an
  /// overload packet); empty for other kinds.
  const std::string& schemaName() const { return schemaName_; }
  /// kAtenOp: "Tensor", "default", or empty for an overload packet (torch.ops.aten.add).
  const std::string& overloadName() const { return overloadName_; }
  /// True when importing qualifiedName() gives back the callable itself.
  bool resolvable() const { return resolvable_; }
  /// The callable's __name__ ("add"), or the op / last part of the qualified name: the basis of
  /// node names.
  const std::string& shortName() const { return shortName_; }

  /// Same qualified name, kind and resolvability (the live handle is not compared).
  bool operator==(const Target& other) const;
  bool operator!=(const Target& other) const { return !(*this == other); }

 private:
  void setName(std::string qualifiedName);

  std::shared_ptr<PyObject> handle_;  ///< released under the GIL by its last owner
  std::string qualifiedName_;
  std::string shortName_;
  std::string method_;
  std::string schemaName_;
  std::string overloadName_;
  TargetKind kind_ = TargetKind::kFunction;
  bool resolvable_ = false;
};

/// One immutable node. Use GraphBuilder to make nodes with unique names.
class Node {
 public:
  /// A graph input; `source` is where it came from in user code ("x", "self.conv1.weight").
  static NodeRef makePlaceholder(std::string name, std::string source, NodeMeta meta = {});
  /// target(*args, **kwargs).
  static NodeRef makeCallFunction(std::string name, Target target, std::vector<Arg> args,
                                  Kwargs kwargs, NodeMeta meta = {});
  /// args[0].method(*args[1:], **kwargs); args must not be empty.
  static NodeRef makeCallMethod(std::string name, std::string method, std::vector<Arg> args,
                                Kwargs kwargs, NodeMeta meta = {});
  /// The graph's result structure (a node, or a tuple/list/dict of Args).
  static NodeRef makeOutput(Arg value, NodeMeta meta = {});

  /// Nodes are shared by handle, never copied.
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// placeholder, call_function, call_method or output.
  NodeOp op() const { return op_; }
  /// The user-visible name, unique in the graph ("add", "add_1").
  const std::string& name() const { return name_; }
  /// Placeholders: the user source of the input; empty for other nodes.
  const std::string& source() const { return source_; }
  /// call_function: the callable. Internal error for other ops.
  const Target& target() const;
  /// call_method: the method name. Internal error for other ops.
  const std::string& method() const;
  /// Positional arguments (output: one Arg, the output structure).
  const std::vector<Arg>& args() const { return args_; }
  /// Keyword arguments in call order.
  const Kwargs& kwargs() const { return kwargs_; }
  /// Optional metadata (tensor meta, user location and stack, stack trace).
  const NodeMeta& meta() const { return meta_; }
  /// The output structure of an output node.
  const Arg& outputValue() const;
  /// The key this node counts under in Graph::opCounts(): the target's qualified name for
  /// call_function, "torch.Tensor.<method>" for call_method, the op name otherwise.
  std::string opKey() const;

  /// Calls f(const NodeRef&) for every node this node uses, in argument order.
  template <typename F>
  void forEachInput(F&& f) const {
    for (const Arg& a : args_) a.forEachNode(f);
    for (const auto& kv : kwargs_) kv.second.forEachNode(f);
  }

 private:
  Node(NodeOp op, std::string name) : op_(op), name_(std::move(name)) {}

  NodeOp op_;
  std::string name_;
  std::string source_;
  std::optional<Target> target_;
  std::string method_;
  std::vector<Arg> args_;
  Kwargs kwargs_;
  NodeMeta meta_;
};

}  // namespace dynamo::core
