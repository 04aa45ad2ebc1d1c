// Module paths of graph nodes ("layer1.0.conv1"), for grouping the graph view.
//
// The store keeps no nn.Module stack, so the path is derived from what it keeps:
//   - a parameter or buffer input names its module exactly: "self.layer1.0.conv1.weight";
//   - every node has its user stack: the call line in each frame, outermost first.
// Frame d of a stack is identified by the call lines of frames 0..d-1 (its "call path"). Walking
// the body in graph order, a node that uses a parameter knows the module of its innermost frame;
// going outwards, the module's last component is dropped at the call line that entered it:
//
//   resnet.py:273  x = self.layer1(x)      frame 1 in ""        <- pops "layer1"
//   container.py:204  input = module(input) frame 2 in layer1    <- pops "0" (no self.X call)
//   resnet.py:93   out = self.bn1(out)     frame 3 in layer1.0  <- pops "bn1"
//   batchnorm.py:171  return F.batch_norm  frame 4 in layer1.0.bn1
//
// and each frame's call path is remembered with its module (the latest one wins: repeated
// blocks share call paths, and graph order keeps each node with the block it follows). A node
// without parameters takes the module of its deepest remembered frame and enters each deeper
// `self.name(...)` call it sees ("out = self.relu(out)" -> "layer1.0.relu"). Methods
// (`self._forward_impl(x)`, names starting with '_') are not modules.
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "dynamo/core/graph.h"
#include "dynamo/gui/inspect_graph.h"

namespace dynamo::gui {
namespace {

using Path = std::vector<std::string>;

bool isNumber(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

Path split(const std::string& s) {
  Path out;
  std::string cur;
  for (char c : s) {
    if (c == '.' || c == '[' || c == ']') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != '\'' && c != '"') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string join(const Path& p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < p.size(); ++i) {
    if (i) out += '.';
    out += p[i];
  }
  return out;
}

/// The module owning a parameter input: "self.layer1.0.conv1.weight" -> [layer1, 0, conv1];
/// false for inputs that are not attributes of self.
bool parameterModule(const std::string& source, Path& out) {
  if (source.rfind("self.", 0) != 0) return false;
  Path p = split(source.substr(5));
  if (p.empty()) return false;
  p.pop_back();
  out = p;
  return true;
}

/// True when `line` mentions self.<name> as a whole word.
bool mentionsSelfAttr(const std::string& line, const std::string& name) {
  const std::string needle = "self." + name;
  for (size_t pos = line.find(needle); pos != std::string::npos; pos = line.find(needle, pos + 1)) {
    const size_t end = pos + needle.size();
    const bool startOk = pos == 0 || !isIdentChar(line[pos - 1]);
    if (startOk && (end >= line.size() || !isIdentChar(line[end]))) return true;
  }
  return false;
}

/// The names of `self.name(` calls in a line, in order.
std::vector<std::string> selfCalls(const std::string& line) {
  std::vector<std::string> names;
  for (size_t pos = line.find("self."); pos != std::string::npos; pos = line.find("self.", pos + 1)) {
    if (pos > 0 && isIdentChar(line[pos - 1])) continue;
    size_t i = pos + 5;
    while (i < line.size() && isIdentChar(line[i])) ++i;
    size_t j = i;
    while (j < line.size() && line[j] == ' ') ++j;
    if (i > pos + 5 && j < line.size() && line[j] == '(') names.push_back(line.substr(pos + 5, i - pos - 5));
  }
  return names;
}

/// Drops the components of `p` that the call line `line` entered (see the banner).
void popEntered(Path& p, const std::string& line) {
  bool numberPopped = false;
  while (!p.empty()) {
    const std::string& last = p.back();
    if (isNumber(last)) {
      const bool indexed = line.find("[" + last + "]") != std::string::npos;
      if (indexed || (!numberPopped && selfCalls(line).empty())) {
        p.pop_back();
        numberPopped = true;
        continue;
      }
      return;
    }
    if (!mentionsSelfAttr(line, last)) return;
    p.pop_back();
  }
}

std::string frameKey(const std::vector<SourceLocation>& stack, size_t depth) {
  std::string key;
  for (size_t i = 0; i < depth && i < stack.size(); ++i) {
    key += stack[i].file;
    key += ':';
    key += std::to_string(stack[i].line);
    key += '|';
  }
  return key;
}

class ModulePathDeriver {
 public:
  /// The module path of a body node.
  Path derive(const core::Node& node, const std::vector<Path>& inputParams,
              const std::vector<bool>& hasParam) {
    const std::vector<SourceLocation>& stack = node.meta().userStack;
    for (size_t i = 0; i < inputParams.size(); ++i) {
      if (!hasParam[i]) continue;
      remember(stack, inputParams[i]);
      return inputParams[i];
    }
    if (stack.empty()) return {};
    const size_t k = stack.size() - 1;
    size_t d = k;
    auto it = known_.end();
    for (;; --d) {
      it = known_.find(frameKey(stack, d));
      if (it != known_.end() || d == 0) break;
    }
    Path p = it != known_.end() ? it->second : Path{};
    for (size_t b = d; b < k; ++b) {
      for (const std::string& name : selfCalls(stack[b].sourceLine))
        if (!name.empty() && name[0] != '_') {
          p.push_back(name);
          break;
        }
      known_[frameKey(stack, b + 1)] = p;
    }
    return p;
  }

 private:
  void remember(const std::vector<SourceLocation>& stack, Path p) {
    if (stack.empty()) return;
    for (size_t d = stack.size(); d-- > 0;) {
      known_[frameKey(stack, d)] = p;
      if (d > 0) popEntered(p, stack[d - 1].sourceLine);
    }
  }
  std::map<std::string, Path> known_;
};

}  // namespace

std::vector<std::string> deriveModulePaths(const core::Graph& graph) {
  const std::vector<core::NodeRef> nodes = graph.nodes();
  std::map<const core::Node*, std::pair<bool, Path>> params;
  std::vector<std::string> out;
  out.reserve(nodes.size());
  for (const core::NodeRef& n : graph.inputs()) {
    Path p;
    const bool isParam = parameterModule(n->source(), p);
    params[n.get()] = {isParam, p};
    out.push_back(isParam ? join(p, p.size()) : std::string());
  }
  ModulePathDeriver deriver;
  for (const core::NodeRef& n : graph.body()) {
    std::vector<Path> inputParams;
    std::vector<bool> hasParam;
    n->forEachInput([&](const core::NodeRef& in) {
      auto it = params.find(in.get());
      if (it == params.end()) return;
      inputParams.push_back(it->second.second);
      hasParam.push_back(it->second.first);
    });
    const Path p = deriver.derive(*n, inputParams, hasParam);
    out.push_back(join(p, p.size()));
  }
  out.push_back(std::string());  // the output node
  return out;
}

}  // namespace dynamo::gui
