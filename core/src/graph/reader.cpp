// The C++ reader of serialized graphs (readGraphJson in graph_serializer.h): JSON text back to
// an immutable Graph through GraphBuilder, with no Python. Every check names the node (by
// position and name) and the member at fault.
#include <limits>
#include <unordered_map>

#include "dynamo/core/graph_serializer.h"
#include "json_format.h"

namespace dynamo::core {
namespace {

// Reads one document; `where` is the context every error message starts with.
class Reader {
 public:
  Graph read(const std::string& text);

 private:
  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw UserError(UserErrorKind::kInvalidArgument,
                    detail::concat("cannot read graph JSON: ", where_, parts...));
  }

  const Json& member(const Json& obj, const char* key) const;
  std::string str(const Json& obj, const char* key) const;
  std::vector<int64_t> ints(const Json& value, const char* what) const;
  Arg arg(const Json& value) const;
  std::vector<Arg> args(const Json& node) const;
  Kwargs kwargs(const Json& node) const;
  SourceLocation location(const Json& value) const;
  TensorMeta tensorMeta(const Json& value) const;
  NodeMeta meta(const Json& node) const;
  Target target(const Json& node) const;
  void checkName(const NodeRef& n, const std::string& expected) const;
  void readNode(const Json& node);

  std::string where_;
  GraphBuilder builder_;
  std::unordered_map<std::string, NodeRef> byName_;
  bool sawBody_ = false;
  bool sawOutput_ = false;
};

const Json& Reader::member(const Json& obj, const char* key) const {
  if (!obj.is_object()) fail("expected an object, got ", obj.type_name());
  auto it = obj.find(key);
  if (it == obj.end()) fail("missing member \"", key, "\"");
  return *it;
}

std::string Reader::str(const Json& obj, const char* key) const {
  const Json& v = member(obj, key);
  if (!v.is_string()) fail("member \"", key, "\" must be a string, got ", v.type_name());
  return v.get<std::string>();
}

std::vector<int64_t> Reader::ints(const Json& value, const char* what) const {
  if (!value.is_array()) fail(what, " must be an array of integers");
  std::vector<int64_t> out;
  for (const Json& v : value) {
    if (!v.is_number_integer()) fail(what, " must be an array of integers, got ", v.dump());
    out.push_back(v.get<int64_t>());
  }
  return out;
}

Arg Reader::arg(const Json& v) const {
  switch (v.type()) {
    case Json::value_t::null: return Arg::none();
    case Json::value_t::boolean: return Arg::boolean(v.get<bool>());
    case Json::value_t::number_integer: return Arg::integer(v.get<int64_t>());
    case Json::value_t::number_unsigned:
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("integer argument ", v.dump(), " does not fit in 64 bits");
      }
      return Arg::integer(v.get<int64_t>());
    case Json::value_t::number_float: return Arg::floating(v.get<double>());
    case Json::value_t::string: return Arg::string(v.get<std::string>());
    case Json::value_t::array: {
      std::vector<Arg> items;
      for (const Json& item : v) items.push_back(arg(item));
      return Arg::list(std::move(items));
    }
    case Json::value_t::object: break;
    default: fail("malformed argument ", v.dump());
  }
  if (v.size() != 1) fail("malformed argument ", v.dump(), ": expected one tag");
  const std::string& tag = v.begin().key();
  const Json& payload = v.begin().value();
  auto text = [&]() {
    if (!payload.is_string()) fail("argument tag \"", tag, "\" needs a string, got ", payload.dump());
    return payload.get<std::string>();
  };
  auto items = [&]() {
    if (!payload.is_array()) fail("argument tag \"", tag, "\" needs an array, got ", payload.dump());
    std::vector<Arg> out;
    for (const Json& item : payload) out.push_back(arg(item));
    return out;
  };
  if (tag == "node") {
    std::string name = text();
    auto it = byName_.find(name);
    if (it == byName_.end()) fail("uses node '", name, "', which is not defined before it");
    return Arg::node(it->second);
  }
  if (tag == "float") {
    std::string s = text();
    if (s == "inf") return Arg::floating(std::numeric_limits<double>::infinity());
    if (s == "-inf") return Arg::floating(-std::numeric_limits<double>::infinity());
    if (s == "nan") return Arg::floating(std::numeric_limits<double>::quiet_NaN());
    fail("unknown float value \"", s, "\" (expected inf, -inf or nan)");
  }
  if (tag == "dtype") return Arg::dtype(text());
  if (tag == "device") return Arg::device(text());
  if (tag == "memory_format") return Arg::memoryFormat(text());
  if (tag == "layout") return Arg::layout(text());
  if (tag == "ellipsis") return Arg::ellipsis();
  if (tag == "tuple") return Arg::tuple(items());
  if (tag == "slice") {
    std::vector<Arg> parts = items();
    if (parts.size() != 3) fail("a slice needs [start, stop, step], got ", payload.dump());
    return Arg::slice(parts[0], parts[1], parts[2]);
  }
  if (tag == "dict") {
    if (!payload.is_array()) fail("argument tag \"dict\" needs an array of [key, value] pairs");
    std::vector<std::pair<std::string, Arg>> entries;
    for (const Json& e : payload) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_string()) {
        fail("a dict entry must be [str key, value], got ", e.dump());
      }
      entries.emplace_back(e[0].get<std::string>(), arg(e[1]));
    }
    return Arg::dict(std::move(entries));
  }
  fail("unknown argument tag \"", tag, "\"");
}

std::vector<Arg> Reader::args(const Json& node) const {
  const Json& list = member(node, "args");
  if (!list.is_array()) fail("member \"args\" must be an array");
  std::vector<Arg> out;
  for (const Json& a : list) out.push_back(arg(a));
  return out;
}

Kwargs Reader::kwargs(const Json& node) const {
  auto it = node.find("kwargs");
  if (it == node.end()) return {};
  if (!it->is_object()) fail("member \"kwargs\" must be an object");
  Kwargs out;
  for (const auto& [key, value] : it->items()) out.emplace_back(key, arg(value));
  return out;
}

SourceLocation Reader::location(const Json& value) const {
  const Json& line = member(value, "line");
  if (!line.is_number_integer()) fail("a location's \"line\" must be an integer");
  return SourceLocation{str(value, "file"), line.get<int>(), str(value, "source_line")};
}

TensorMeta Reader::tensorMeta(const Json& value) const {
  TensorMeta t;
  t.shape = ints(member(value, "shape"), "tensor meta \"shape\"");
  t.dtype = str(value, "dtype");
  t.device = str(value, "device");
  const Json& grad = member(value, "requires_grad");
  if (!grad.is_boolean()) fail("tensor meta \"requires_grad\" must be true or false");
  t.requiresGrad = grad.get<bool>();
  if (auto it = value.find("strides"); it != value.end()) {
    t.strides = ints(*it, "tensor meta \"strides\"");
    if (t.strides->size() != t.shape.size()) fail("tensor meta has ", t.shape.size(),
                                                  " sizes but ", t.strides->size(), " strides");
    std::string format = str(value, "memory_format");
    bool known = false;
    for (MemoryFormat f : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast,
                           MemoryFormat::kOther}) {
      if (format == memoryFormatName(f)) t.memoryFormat = f, known = true;
    }
    if (!known) fail("unknown memory format \"", format, "\"");
  }
  if (auto it = value.find("sym_shape"); it != value.end()) {
    if (!it->is_array()) fail("tensor meta \"sym_shape\" must be an array");
    if (it->size() != t.shape.size()) fail("tensor meta has ", t.shape.size(), " sizes but ", it->size(),
                                           " symbolic sizes");
    for (const Json& e : *it) {
      if (!e.is_null() && !e.is_string()) fail("tensor meta \"sym_shape\" items must be strings or null");
      t.symShape.push_back(e.is_null() ? std::string() : e.get<std::string>());
    }
  }
  return t;
}

NodeMeta Reader::meta(const Json& node) const {
  NodeMeta m;
  auto it = node.find("meta");
  if (it == node.end()) return m;
  const Json& meta = *it;
  if (!meta.is_object()) fail("member \"meta\" must be an object");
  if (auto t = meta.find("tensor"); t != meta.end()) m.tensor = tensorMeta(*t);
  if (auto l = meta.find("location"); l != meta.end()) m.location = location(*l);
  if (auto s = meta.find("user_stack"); s != meta.end()) {
    if (!s->is_array()) fail("meta \"user_stack\" must be an array");
    for (const Json& frame : *s) m.userStack.push_back(location(frame));
  }
  if (meta.contains("stack_trace")) m.stackTrace = str(meta, "stack_trace");
  return m;
}

Target Reader::target(const Json& node) const {
  bool resolvable = true;
  if (auto r = node.find("resolvable"); r != node.end()) {
    if (!r->is_boolean()) fail("member \"resolvable\" must be true or false");
    resolvable = r->get<bool>();
  }
  Target t = Target::fromName(str(node, "target"), resolvable);
  if (node.contains("schema")) {
    std::string schema = str(node, "schema");
    if (t.kind() != TargetKind::kAtenOp || t.schemaName() != schema) {
      fail("schema \"", schema, "\" does not match target \"", t.qualifiedName(), "\"");
    }
  }
  return t;
}

// GraphBuilder names nodes; a name it would not give (a duplicate, "output", a keyword, ...)
// means the text was not written by serializeGraph.
void Reader::checkName(const NodeRef& n, const std::string& expected) const {
  if (n->name() != expected) {
    fail("node name '", expected, "' is a duplicate or not a valid node name (it would become '",
         n->name(), "')");
  }
}

void Reader::readNode(const Json& node) {
  if (!node.is_object()) fail("a node must be an object, got ", node.type_name());
  std::string op = str(node, "op");
  std::string name = str(node, "name");
  where_ += "'" + name + "': ";
  if (sawOutput_) fail("nodes after the output node");
  NodeRef n;
  if (op == "placeholder") {
    if (sawBody_) fail("placeholders must come before the call nodes");
    n = builder_.placeholder(str(node, "source"), meta(node), name);
  } else if (op == "call_function") {
    sawBody_ = true;
    n = builder_.callFunction(target(node), args(node), kwargs(node), meta(node), name);
  } else if (op == "call_method") {
    sawBody_ = true;
    std::vector<Arg> a = args(node);
    if (a.empty()) fail("a call_method node needs the object it is called on as its first arg");
    n = builder_.callMethod(str(node, "target"), std::move(a), kwargs(node), meta(node), name);
  } else if (op == "output") {
    std::vector<Arg> a = args(node);
    if (a.size() != 1) fail("the output node needs exactly one arg, got ", a.size());
    if (name != "output") fail("the output node must be named 'output'");
    builder_.output(a.front(), meta(node));
    sawOutput_ = true;
    return;
  } else {
    fail("unknown node op \"", op, "\"");
  }
  checkName(n, name);
  byName_.emplace(name, n);
}

Graph Reader::read(const std::string& text) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    fail("not valid JSON (", e.what(), ")");
  }
  if (!doc.is_object()) fail("expected a JSON object, got ", doc.type_name());
  auto format = doc.find("format");
  if (format == doc.end() || *format != kGraphFormatName) {
    fail("not a Dynamo graph: expected format \"", kGraphFormatName, "\"");
  }
  auto version = doc.find("version");
  if (version == doc.end() || *version != kGraphFormatVersion) {
    fail("graph format version ", version == doc.end() ? "(none)" : version->dump(),
         " is not supported (this reader knows version ", kGraphFormatVersion, ")");
  }
  const Json& nodes = member(doc, "nodes");
  if (!nodes.is_array()) fail("member \"nodes\" must be an array");
  for (size_t i = 0; i < nodes.size(); ++i) {
    where_ = "node " + std::to_string(i) + " ";
    readNode(nodes[i]);
  }
  where_.clear();
  if (!sawOutput_) fail("the graph has no output node");
  return builder_.build();
}

}  // namespace

Graph readGraphJson(const std::string& text) {
  Reader reader;
  return reader.read(text);
}

bool sameGraph(const Graph& a, const Graph& b) { return serializeGraph(a) == serializeGraph(b); }

}  // namespace dynamo::core
