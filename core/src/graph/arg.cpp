// Arg: constructors and checked accessors of the graph argument variant (graph_arg.h).
#include "dynamo/common/error.h"
#include "dynamo/core/graph_arg.h"

namespace dynamo::core {

const char* argKindName(ArgKind kind) {
  switch (kind) {
    case ArgKind::kNode: return "node";
    case ArgKind::kNone: return "none";
    case ArgKind::kBool: return "bool";
    case ArgKind::kInt: return "int";
    case ArgKind::kFloat: return "float";
    case ArgKind::kStr: return "str";
    case ArgKind::kDtype: return "dtype";
    case ArgKind::kDevice: return "device";
    case ArgKind::kMemoryFormat: return "memory_format";
    case ArgKind::kLayout: return "layout";
    case ArgKind::kEllipsis: return "ellipsis";
    case ArgKind::kSlice: return "slice";
    case ArgKind::kTuple: return "tuple";
    case ArgKind::kList: return "list";
    case ArgKind::kDict: return "dict";
  }
  return "?";
}

Arg Arg::node(NodeRef n) {
  DYNAMO_INTERNAL_ASSERT(n != nullptr, "Arg::node of a null node");
  Arg a;
  a.kind_ = ArgKind::kNode;
  a.containsNode_ = true;
  a.node_ = std::move(n);
  return a;
}

Arg Arg::none() { return Arg(); }

Arg Arg::boolean(bool value) {
  Arg a;
  a.kind_ = ArgKind::kBool;
  a.scalar_.b = value;
  return a;
}

Arg Arg::integer(int64_t value) {
  Arg a;
  a.kind_ = ArgKind::kInt;
  a.scalar_.i = value;
  return a;
}

Arg Arg::floating(double value) {
  Arg a;
  a.kind_ = ArgKind::kFloat;
  a.scalar_.f = value;
  return a;
}

Arg Arg::text(ArgKind kind, std::string value) {
  Arg a;
  a.kind_ = kind;
  a.text_ = std::move(value);
  return a;
}

Arg Arg::string(std::string value) { return text(ArgKind::kStr, std::move(value)); }
Arg Arg::dtype(std::string name) { return text(ArgKind::kDtype, std::move(name)); }
Arg Arg::device(std::string name) { return text(ArgKind::kDevice, std::move(name)); }
Arg Arg::memoryFormat(std::string name) { return text(ArgKind::kMemoryFormat, std::move(name)); }
Arg Arg::layout(std::string name) { return text(ArgKind::kLayout, std::move(name)); }

Arg Arg::ellipsis() {
  Arg a;
  a.kind_ = ArgKind::kEllipsis;
  return a;
}

Arg Arg::container(ArgKind kind, std::vector<Arg> items) {
  Arg a;
  a.kind_ = kind;
  for (const Arg& item : items) a.containsNode_ = a.containsNode_ || item.containsNode_;
  a.items_ = std::make_shared<const std::vector<Arg>>(std::move(items));
  return a;
}

Arg Arg::slice(Arg start, Arg stop, Arg step) {
  return container(ArgKind::kSlice, {std::move(start), std::move(stop), std::move(step)});
}
Arg Arg::tuple(std::vector<Arg> items) { return container(ArgKind::kTuple, std::move(items)); }
Arg Arg::list(std::vector<Arg> items) { return container(ArgKind::kList, std::move(items)); }

Arg Arg::dict(std::vector<std::pair<std::string, Arg>> entries) {
  std::vector<std::string> keys;
  std::vector<Arg> values;
  keys.reserve(entries.size());
  values.reserve(entries.size());
  for (auto& [key, value] : entries) {
    keys.push_back(std::move(key));
    values.push_back(std::move(value));
  }
  Arg a = container(ArgKind::kDict, std::move(values));
  a.keys_ = std::make_shared<const std::vector<std::string>>(std::move(keys));
  return a;
}

bool Arg::isContainer() const {
  return kind_ == ArgKind::kTuple || kind_ == ArgKind::kList || kind_ == ArgKind::kDict ||
         kind_ == ArgKind::kSlice;
}

const NodeRef& Arg::asNode() const {
  DYNAMO_INTERNAL_ASSERT(kind_ == ArgKind::kNode, "asNode on a ", argKindName(kind_), " Arg");
  return node_;
}

bool Arg::asBool() const {
  DYNAMO_INTERNAL_ASSERT(kind_ == ArgKind::kBool, "asBool on a ", argKindName(kind_), " Arg");
  return scalar_.b;
}

int64_t Arg::asInt() const {
  DYNAMO_INTERNAL_ASSERT(kind_ == ArgKind::kInt, "asInt on a ", argKindName(kind_), " Arg");
  return scalar_.i;
}

double Arg::asFloat() const {
  DYNAMO_INTERNAL_ASSERT(kind_ == ArgKind::kFloat, "asFloat on a ", argKindName(kind_), " Arg");
  return scalar_.f;
}

const std::string& Arg::asString() const {
  DYNAMO_INTERNAL_ASSERT(kind_ == ArgKind::kStr || kind_ == ArgKind::kDtype ||
                             kind_ == ArgKind::kDevice || kind_ == ArgKind::kMemoryFormat ||
                             kind_ == ArgKind::kLayout,
                         "asString on a ", argKindName(kind_), " Arg");
  return text_;
}

const std::vector<Arg>& Arg::items() const {
  static const std::vector<Arg> kEmpty;
  return items_ ? *items_ : kEmpty;
}

const std::vector<std::string>& Arg::keys() const {
  static const std::vector<std::string> kEmpty;
  return keys_ ? *keys_ : kEmpty;
}

}  // namespace dynamo::core
