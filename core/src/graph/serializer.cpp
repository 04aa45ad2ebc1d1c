// The graph serializer (graph_serializer.h): JSON text for the trace store.
#include "dynamo/core/graph_serializer.h"

#include <cmath>

#include "json_writer.h"

namespace dynamo::core {
namespace {

void writeArg(JsonWriter& w, const Arg& arg);

void writeItems(JsonWriter& w, const std::vector<Arg>& items) {
  w.beginArray();
  for (const Arg& item : items) writeArg(w, item);
  w.endArray();
}

// {"<kind>": <payload>} for the kinds JSON has no type for.
void writeTagged(JsonWriter& w, const char* tag, const std::string& text) {
  w.beginObject();
  w.key(tag);
  w.value(text);
  w.endObject();
}

void writeArg(JsonWriter& w, const Arg& arg) {
  switch (arg.kind()) {
    case ArgKind::kNone: w.null(); return;
    case ArgKind::kBool: w.value(arg.asBool()); return;
    case ArgKind::kInt: w.value(arg.asInt()); return;
    case ArgKind::kStr: w.value(arg.asString()); return;
    case ArgKind::kList: writeItems(w, arg.items()); return;
    case ArgKind::kFloat:
      if (std::isfinite(arg.asFloat())) {
        w.value(arg.asFloat());
      } else {
        writeTagged(w, "float", std::isnan(arg.asFloat()) ? "nan"
                                : arg.asFloat() > 0       ? "inf"
                                                          : "-inf");
      }
      return;
    case ArgKind::kNode: writeTagged(w, "node", arg.asNode()->name()); return;
    case ArgKind::kDtype:
    case ArgKind::kDevice:
    case ArgKind::kMemoryFormat:
    case ArgKind::kLayout: writeTagged(w, argKindName(arg.kind()), arg.asString()); return;
    case ArgKind::kEllipsis:
      w.beginObject();
      w.key("ellipsis");
      w.value(true);
      w.endObject();
      return;
    case ArgKind::kSlice:
    case ArgKind::kTuple:
      w.beginObject();
      w.key(argKindName(arg.kind()));
      writeItems(w, arg.items());
      w.endObject();
      return;
    case ArgKind::kDict:
      w.beginObject();
      w.key("dict");
      w.beginArray();
      for (size_t i = 0; i < arg.items().size(); ++i) {
        w.beginArray();
        w.value(arg.keys()[i]);
        writeArg(w, arg.items()[i]);
        w.endArray();
      }
      w.endArray();
      w.endObject();
      return;
  }
}

void writeLocation(JsonWriter& w, const SourceLocation& loc) {
  w.beginObject();
  w.key("file");
  w.value(loc.file);
  w.key("line");
  w.value(int64_t{loc.line});
  w.key("source_line");
  w.value(loc.sourceLine);
  w.endObject();
}

void writeMeta(JsonWriter& w, const NodeMeta& meta) {
  w.beginObject();
  if (meta.tensor) {
    w.key("tensor");
    w.beginObject();
    w.key("shape");
    w.beginArray();
    for (int64_t d : meta.tensor->shape) w.value(d);
    w.endArray();
    w.key("dtype");
    w.value(meta.tensor->dtype);
    w.key("device");
    w.value(meta.tensor->device);
    w.key("requires_grad");
    w.value(meta.tensor->requiresGrad);
    w.endObject();
  }
  if (meta.location.known()) {
    w.key("location");
    writeLocation(w, meta.location);
  }
  if (!meta.userStack.empty()) {
    w.key("user_stack");
    w.beginArray();
    for (const SourceLocation& frame : meta.userStack) writeLocation(w, frame);
    w.endArray();
  }
  if (!meta.stackTrace.empty()) {
    w.key("stack_trace");
    w.value(meta.stackTrace);
  }
  w.endObject();
}

void writeNode(JsonWriter& w, const Node& n) {
  w.beginObject();
  w.key("op");
  w.value(nodeOpName(n.op()));
  w.key("name");
  w.value(n.name());
  switch (n.op()) {
    case NodeOp::kPlaceholder:
      w.key("source");
      w.value(n.source());
      break;
    case NodeOp::kCallFunction:
      w.key("target");
      w.value(n.target().qualifiedName());
      if (!n.target().resolvable()) {
        w.key("resolvable");
        w.value(false);
      }
      break;
    case NodeOp::kCallMethod:
      w.key("target");
      w.value(n.method());
      break;
    case NodeOp::kOutput: break;
  }
  if (n.op() != NodeOp::kPlaceholder) {
    w.key("args");
    writeItems(w, n.args());
  }
  if (n.op() == NodeOp::kCallFunction || n.op() == NodeOp::kCallMethod) {
    w.key("kwargs");
    w.beginObject();
    for (const auto& [key, value] : n.kwargs()) {
      w.key(key);
      writeArg(w, value);
    }
    w.endObject();
  }
  w.key("meta");
  writeMeta(w, n.meta());
  w.endObject();
}

}  // namespace

std::string serializeGraph(const Graph& graph, const SerializeOptions& options) {
  JsonWriter w;
  w.beginObject();
  w.key("format");
  w.value("dynamo.graph");
  w.key("version");
  w.value(int64_t{kGraphFormatVersion});
  w.key("nodes");
  w.beginArray();
  for (const NodeRef& n : graph.nodes()) {
    if (options.pretty) w.newline();
    writeNode(w, *n);
  }
  if (options.pretty) w.newline();
  w.endArray();
  w.endObject();
  std::string out = w.str();
  if (options.pretty) out += "\n";
  return out;
}

}  // namespace dynamo::core
