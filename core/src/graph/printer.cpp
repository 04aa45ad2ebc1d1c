// The graph printer (graph_printer.h): stable, readable text, one node per line.
#include "dynamo/core/graph_printer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace dynamo::core {

std::string formatFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest digit string that reads back to the same double.
  char buf[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  // buf is "[-]d.ddde[+-]XX": split into sign, digits and decimal exponent.
  std::string text(buf);
  bool negative = text[0] == '-';
  if (negative) text.erase(0, 1);
  size_t e = text.find('e');
  int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (text[i] != '.') digits += text[i];
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {  // Python's repr switches to exponent form here
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char expText[16];
    std::snprintf(expText, sizeof expText, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + expText;
  }
  if (exponent < 0) return out + "0." + std::string(-exponent - 1, '0') + digits;
  if (static_cast<int>(digits.size()) <= exponent + 1) {
    return out + digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

namespace {

// Python's repr() of a str (UTF-8 passes through; control characters are escaped).
std::string reprString(const std::string& s) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + quote;
}

std::string joinItems(const std::vector<Arg>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += printArg(items[i]);
  }
  return out;
}

// "f32" for "torch.float32" and the other common dtypes; the full name otherwise.
std::string shortDtype(const std::string& dtype) {
  static const std::pair<const char*, const char*> kShort[] = {
      {"torch.float32", "f32"}, {"torch.float64", "f64"},  {"torch.float16", "f16"},
      {"torch.bfloat16", "bf16"}, {"torch.int64", "i64"},   {"torch.int32", "i32"},
      {"torch.int16", "i16"},   {"torch.int8", "i8"},      {"torch.uint8", "u8"},
      {"torch.bool", "b8"},     {"torch.complex64", "c64"}, {"torch.complex128", "c128"},
  };
  for (const auto& [name, abbrev] : kShort) {
    if (dtype == name) return abbrev;
  }
  return dtype;
}

std::string printTensorMeta(const TensorMeta& t) {
  std::string out = shortDtype(t.dtype) + "[";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(t.shape[i]);
  }
  out += "]";
  std::string extras;
  if (!t.device.empty() && t.device != "cpu") extras += t.device;
  if (t.requiresGrad) extras += std::string(extras.empty() ? "" : ", ") + "requires_grad";
  if (!extras.empty()) out += "{" + extras + "}";
  return out;
}

std::string printCallArgs(const Node& n, size_t firstArg) {
  std::string out;
  for (size_t i = firstArg; i < n.args().size(); ++i) {
    if (!out.empty()) out += ", ";
    out += printArg(n.args()[i]);
  }
  for (const auto& [key, value] : n.kwargs()) {
    if (!out.empty()) out += ", ";
    out += key + "=" + printArg(value);
  }
  return out;
}

std::string printNodeValue(const Node& n) {
  switch (n.op()) {
    case NodeOp::kPlaceholder: return "placeholder[source=" + n.source() + "]";
    case NodeOp::kCallFunction:
      return n.target().qualifiedName() + "(" + printCallArgs(n, 0) + ")";
    case NodeOp::kCallMethod:
      return printArg(n.args().front()) + "." + n.method() + "(" + printCallArgs(n, 1) + ")";
    case NodeOp::kOutput: break;
  }
  return {};
}

}  // namespace

std::string printArg(const Arg& arg) {
  switch (arg.kind()) {
    case ArgKind::kNode: return "%" + arg.asNode()->name();
    case ArgKind::kNone: return "None";
    case ArgKind::kBool: return arg.asBool() ? "True" : "False";
    case ArgKind::kInt: return std::to_string(arg.asInt());
    case ArgKind::kFloat: return formatFloat(arg.asFloat());
    case ArgKind::kStr: return reprString(arg.asString());
    case ArgKind::kDtype:
    case ArgKind::kMemoryFormat:
    case ArgKind::kLayout: return arg.asString();
    case ArgKind::kDevice: return "device(" + reprString(arg.asString()) + ")";
    case ArgKind::kEllipsis: return "...";
    case ArgKind::kSlice: return "slice(" + joinItems(arg.items()) + ")";
    case ArgKind::kTuple:
      return "(" + joinItems(arg.items()) + (arg.items().size() == 1 ? ",)" : ")");
    case ArgKind::kList: return "[" + joinItems(arg.items()) + "]";
    case ArgKind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < arg.items().size(); ++i) {
        if (i) out += ", ";
        out += reprString(arg.keys()[i]) + ": " + printArg(arg.items()[i]);
      }
      return out + "}";
    }
  }
  return "?";
}

std::string printNode(const Node& node) {
  if (node.op() == NodeOp::kOutput) return "return " + printArg(node.outputValue());
  return "%" + node.name() + " = " + printNodeValue(node);
}

std::string printGraph(const Graph& graph, const PrintOptions& options) {
  std::ostringstream out;
  out << "graph(";
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    out << (i ? ", %" : "%") << graph.inputs()[i]->name();
  }
  out << "):\n";
  auto line = [&](const Node& n, const std::string& text) {
    out << "  " << text;
    const SourceLocation& loc = n.meta().location;
    if (options.showLocations && loc.known()) out << "  # " << loc.str();
    out << "\n";
  };
  for (const auto* list : {&graph.inputs(), &graph.body()}) {
    for (const NodeRef& n : *list) {
      std::string lhs = "%" + n->name();
      if (options.showTensorMeta && n->meta().tensor) {
        lhs += ": " + printTensorMeta(*n->meta().tensor);
      }
      line(*n, lhs + " = " + printNodeValue(*n));
    }
  }
  line(*graph.output(), "return " + printArg(graph.output()->outputValue()));
  return out.str();
}

}  // namespace dynamo::core
