// The graph serializer (graph_serializer.h): JSON text for the trace store, on nlohmann::json.
#include <cmath>

#include "dynamo/core/graph_serializer.h"
#include "json_format.h"

namespace dynamo::core {
namespace {

Json argToJson(const Arg& arg);

Json itemsToJson(const std::vector<Arg>& items) {
  Json out = Json::array();
  for (const Arg& item : items) out.push_back(argToJson(item));
  return out;
}

// {"<kind>": <payload>} for the kinds JSON has no type for.
Json tagged(const char* tag, Json payload) {
  Json out = Json::object();
  out[tag] = std::move(payload);
  return out;
}

Json floatToJson(double value) {
  if (std::isfinite(value)) return value;
  return tagged("float", std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf");
}

Json argToJson(const Arg& arg) {
  switch (arg.kind()) {
    case ArgKind::kNone: return nullptr;
    case ArgKind::kBool: return arg.asBool();
    case ArgKind::kInt: return arg.asInt();
    case ArgKind::kFloat: return floatToJson(arg.asFloat());
    case ArgKind::kStr: return arg.asString();
    case ArgKind::kList: return itemsToJson(arg.items());
    case ArgKind::kNode: return tagged("node", arg.asNode()->name());
    case ArgKind::kDtype:
    case ArgKind::kDevice:
    case ArgKind::kMemoryFormat:
    case ArgKind::kLayout: return tagged(argKindName(arg.kind()), arg.asString());
    case ArgKind::kEllipsis: return tagged("ellipsis", true);
    case ArgKind::kSlice:
    case ArgKind::kTuple: return tagged(argKindName(arg.kind()), itemsToJson(arg.items()));
    case ArgKind::kDict: {
      Json entries = Json::array();
      for (size_t i = 0; i < arg.items().size(); ++i) {
        entries.push_back(Json::array({arg.keys()[i], argToJson(arg.items()[i])}));
      }
      return tagged("dict", std::move(entries));
    }
  }
  return nullptr;
}

Json locationToJson(const SourceLocation& loc) {
  Json out = Json::object();
  out["file"] = loc.file;
  out["line"] = loc.line;
  out["source_line"] = loc.sourceLine;
  return out;
}

Json tensorMetaToJson(const TensorMeta& t) {
  Json out = Json::object();
  out["shape"] = t.shape;
  out["dtype"] = t.dtype;
  out["device"] = t.device;
  out["requires_grad"] = t.requiresGrad;
  if (t.strides) {
    out["strides"] = *t.strides;
    out["memory_format"] = memoryFormatName(t.memoryFormat);
  }
  if (!t.symShape.empty()) {  // only with dynamic dimensions: static graphs' JSON is unchanged
    Json sym = Json::array();
    for (const std::string& e : t.symShape) sym.push_back(e.empty() ? Json(nullptr) : Json(e));
    out["sym_shape"] = std::move(sym);
  }
  return out;
}

Json metaToJson(const NodeMeta& meta) {
  Json out = Json::object();
  if (meta.tensor) out["tensor"] = tensorMetaToJson(*meta.tensor);
  if (meta.location.known()) out["location"] = locationToJson(meta.location);
  if (!meta.userStack.empty()) {
    Json stack = Json::array();
    for (const SourceLocation& frame : meta.userStack) stack.push_back(locationToJson(frame));
    out["user_stack"] = std::move(stack);
  }
  if (!meta.stackTrace.empty()) out["stack_trace"] = meta.stackTrace;
  return out;
}

Json nodeToJson(const Node& n) {
  Json out = Json::object();
  out["op"] = nodeOpName(n.op());
  out["name"] = n.name();
  switch (n.op()) {
    case NodeOp::kPlaceholder: out["source"] = n.source(); break;
    case NodeOp::kCallFunction:
      out["target"] = n.target().qualifiedName();
      if (n.target().kind() == TargetKind::kAtenOp) out["schema"] = n.target().schemaName();
      if (!n.target().resolvable()) out["resolvable"] = false;
      break;
    case NodeOp::kCallMethod: out["target"] = n.method(); break;
    case NodeOp::kOutput: break;
  }
  if (n.op() != NodeOp::kPlaceholder) out["args"] = itemsToJson(n.args());
  if (n.op() == NodeOp::kCallFunction || n.op() == NodeOp::kCallMethod) {
    Json kwargs = Json::object();
    for (const auto& [key, value] : n.kwargs()) kwargs[key] = argToJson(value);
    out["kwargs"] = std::move(kwargs);
  }
  out["meta"] = metaToJson(n.meta());
  return out;
}

std::string dump(const Json& j) {
  // Compact; invalid UTF-8 (never produced by Python str) is replaced rather than thrown on.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

std::string serializeGraph(const Graph& graph, const SerializeOptions& options) {
  Json doc = Json::object();
  doc["format"] = kGraphFormatName;
  doc["version"] = kGraphFormatVersion;
  doc["nodes"] = Json::array();
  if (!options.pretty) {
    for (const NodeRef& n : graph.nodes()) doc["nodes"].push_back(nodeToJson(*n));
    return dump(doc);
  }
  // One node per line: the document without nodes, opened up after "nodes":[.
  std::string head = dump(doc);
  std::string out = head.substr(0, head.size() - 2);  // drop "]}"
  const char* sep = "\n";
  for (const NodeRef& n : graph.nodes()) {
    out += sep;
    out += dump(nodeToJson(*n));
    sep = ",\n";
  }
  out += "\n]}\n";
  return out;
}

}  // namespace dynamo::core
