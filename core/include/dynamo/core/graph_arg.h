// Arguments of graph nodes: a small immutable variant.
//
// An Arg is a reference to an earlier node, a Python constant the graph can name without holding
// the object (None, bool, int, float, str, torch.dtype, torch.device, torch.memory_format,
// torch.layout, Ellipsis, slice), or a container of Args (tuple, list, dict with str keys). The
// same type describes a graph's output structure. Args are values: cheap to copy (containers are
// shared), never changed after creation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dynamo::core {

class Node;
/// A ref-counted handle to an immutable node.
using NodeRef = std::shared_ptr<const Node>;

/// What an Arg holds.
enum class ArgKind {
  kNode,          ///< the value of an earlier node
  kNone,          ///< None
  kBool,          ///< True / False
  kInt,           ///< a Python int that fits in 64 bits
  kFloat,         ///< a Python float
  kStr,           ///< a Python str (UTF-8)
  kDtype,         ///< torch.dtype, by name: "torch.float32"
  kDevice,        ///< torch.device, by its str(): "cpu", "cuda:0"
  kMemoryFormat,  ///< torch.memory_format, by name: "torch.channels_last"
  kLayout,        ///< torch.layout, by name: "torch.strided"
  kEllipsis,      ///< Ellipsis (...)
  kSlice,         ///< slice(start, stop, step); items() holds the three parts
  kTuple,         ///< a tuple of Args
  kList,          ///< a list of Args
  kDict,          ///< a dict with str keys; keys() and items() are parallel
};

/// Name of an ArgKind as the serializer writes it ("node", "dtype", ...).
const char* argKindName(ArgKind kind);

/// One argument of a node (or the output structure of a graph). Immutable value type.
class Arg {
 public:
  /// None.
  Arg() = default;

  /// The value of node n (must not be null).
  static Arg node(NodeRef n);
  /// None.
  static Arg none();
  /// True or False.
  static Arg boolean(bool value);
  /// A Python int that fits in 64 bits.
  static Arg integer(int64_t value);
  /// A Python float.
  static Arg floating(double value);
  /// A Python str (UTF-8).
  static Arg string(std::string value);
  /// A torch.dtype by qualified name, e.g. "torch.float32".
  static Arg dtype(std::string name);
  /// A torch.device by its str(), e.g. "cpu", "cuda:0".
  static Arg device(std::string name);
  /// A torch.memory_format by qualified name, e.g. "torch.contiguous_format".
  static Arg memoryFormat(std::string name);
  /// A torch.layout by qualified name, e.g. "torch.strided".
  static Arg layout(std::string name);
  /// Ellipsis (...).
  static Arg ellipsis();
  /// slice(start, stop, step); each part is usually None, an int or a node.
  static Arg slice(Arg start, Arg stop, Arg step);
  /// A tuple of Args.
  static Arg tuple(std::vector<Arg> items);
  /// A list of Args.
  static Arg list(std::vector<Arg> items);
  /// A dict with str keys, in insertion order.
  static Arg dict(std::vector<std::pair<std::string, Arg>> entries);

  /// What this Arg holds.
  ArgKind kind() const { return kind_; }
  /// True for a node reference.
  bool isNode() const { return kind_ == ArgKind::kNode; }
  /// True for tuple, list, dict and slice.
  bool isContainer() const;
  /// True when this Arg is, or contains, a node reference.
  bool containsNode() const { return containsNode_; }

  /// The node of a kNode Arg.
  const NodeRef& asNode() const;
  /// The value of a kBool / kInt / kFloat Arg (internal error for other kinds).
  bool asBool() const;
  int64_t asInt() const;   ///< see asBool()
  double asFloat() const;  ///< see asBool()
  /// The text of kStr, kDtype, kDevice, kMemoryFormat and kLayout Args.
  const std::string& asString() const;
  /// Elements of tuple/list, values of dict, (start, stop, step) of slice.
  const std::vector<Arg>& items() const;
  /// Keys of a dict, parallel to items().
  const std::vector<std::string>& keys() const;

  /// Calls f(const NodeRef&) for every node reference, depth first, in order.
  template <typename F>
  void forEachNode(F&& f) const {
    if (!containsNode_) return;
    if (kind_ == ArgKind::kNode) {
      f(node_);
      return;
    }
    for (const Arg& item : items()) item.forEachNode(f);
  }

 private:
  static Arg container(ArgKind kind, std::vector<Arg> items);
  static Arg text(ArgKind kind, std::string value);

  ArgKind kind_ = ArgKind::kNone;
  bool containsNode_ = false;
  union {
    bool b;
    int64_t i;
    double f;
  } scalar_{};
  std::string text_;
  NodeRef node_;
  std::shared_ptr<const std::vector<Arg>> items_;
  std::shared_ptr<const std::vector<std::string>> keys_;
};

/// Keyword arguments, in call order.
using Kwargs = std::vector<std::pair<std::string, Arg>>;

}  // namespace dynamo::core
