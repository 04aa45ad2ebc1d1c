// Graph and GraphBuilder (graph.h): freezing, validation and FX-compatible unique naming.
#include "dynamo/core/graph.h"

#include <cctype>
#include <unordered_set>

namespace dynamo::core {

struct Graph::Data {
  std::vector<NodeRef> inputs;
  std::vector<NodeRef> body;
  NodeRef output;
  std::unordered_map<const Node*, std::vector<NodeRef>> users;  ///< node -> its users, in order
};

const std::vector<NodeRef>& Graph::inputs() const { return data_->inputs; }
const std::vector<NodeRef>& Graph::body() const { return data_->body; }
const NodeRef& Graph::output() const { return data_->output; }
size_t Graph::size() const { return data_->inputs.size() + data_->body.size() + 1; }

std::vector<NodeRef> Graph::nodes() const {
  std::vector<NodeRef> all(data_->inputs);
  all.insert(all.end(), data_->body.begin(), data_->body.end());
  all.push_back(data_->output);
  return all;
}

NodeRef Graph::find(const std::string& name) const {
  for (const NodeRef& n : nodes()) {
    if (n->name() == name) return n;
  }
  return nullptr;
}

std::map<std::string, int> Graph::opCounts() const {
  std::map<std::string, int> counts;
  for (const NodeRef& n : data_->body) ++counts[n->opKey()];
  return counts;
}

const std::vector<NodeRef>& Graph::users(const Node& n) const {
  static const std::vector<NodeRef> kNone;
  auto it = data_->users.find(&n);
  return it == data_->users.end() ? kNone : it->second;
}

namespace {

// Names a node may not take, as in torch.fx: Python keywords, builtins, FX's own globals.
bool isReservedName(const std::string& name) {
  static const std::unordered_set<std::string> kReserved = [] {
    const char* names[] = {
        // keywords
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
        "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
        "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise",
        "return", "try", "while", "with", "yield",
        // builtins (functions and types; exception classes are capitalised, not listed)
        "abs", "aiter", "all", "anext", "any", "ascii", "bin", "bool", "breakpoint", "bytearray",
        "bytes", "callable", "chr", "classmethod", "compile", "complex", "copyright", "credits",
        "delattr", "dict", "dir", "divmod", "enumerate", "eval", "exec", "exit", "filter",
        "float", "format", "frozenset", "getattr", "globals", "hasattr", "hash", "help", "hex",
        "id", "input", "int", "isinstance", "issubclass", "iter", "len", "license", "list",
        "locals", "map", "max", "memoryview", "min", "next", "object", "oct", "open", "ord",
        "pow", "print", "property", "quit", "range", "repr", "reversed", "round", "set",
        "setattr", "slice", "sorted", "staticmethod", "str", "sum", "super", "tuple", "type",
        "vars", "zip", "Ellipsis", "NotImplemented", "__import__", "__build_class__",
        "__debug__", "__name__",
        // torch.fx's generated-code globals
        "inf", "nan", "NoneType", "torch", "device", "fx_pytree", "pytree",
    };
    return std::unordered_set<std::string>(std::begin(names), std::end(names));
  }();
  return kReserved.count(name) != 0;
}

// Replaces runs of characters that cannot be in an identifier by '_'; no leading digit.
std::string sanitizeName(const std::string& candidate) {
  std::string out;
  bool inBad = false;
  for (char c : candidate) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    if (ok) out += c;
    else if (!inBad) out += '_';
    inBad = !ok;
  }
  if (out.empty()) out = "_";
  if (std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

// Records user as a user of each node it uses (once per node, however often it uses it).
void addUses(std::unordered_map<const Node*, std::vector<NodeRef>>& users, const NodeRef& user) {
  user->forEachInput([&](const NodeRef& used) {
    std::vector<NodeRef>& list = users[used.get()];
    if (list.empty() || list.back() != user) list.push_back(user);
  });
}

}  // namespace

// "output" is the output node's name: no other node may take it.
GraphBuilder::GraphBuilder() { usedNames_.emplace("output", 0); }

GraphBuilder::GraphBuilder(const Graph& base) : GraphBuilder() {
  for (const NodeRef& n : base.inputs()) add(n, true);
  for (const NodeRef& n : base.body()) add(n, false);
}

// Same rule as torch.fx's _Namespace.create_name: a trailing "_<n>" is a counter; bump it until
// the name is free and not reserved.
std::string GraphBuilder::uniqueName(const std::string& rawCandidate) {
  std::string candidate = sanitizeName(rawCandidate);
  std::string base = candidate;
  long num = 0;
  size_t us = candidate.rfind('_');
  if (us != std::string::npos && us + 1 < candidate.size() && us > 0 &&
      candidate.find_first_not_of("0123456789", us + 1) == std::string::npos &&
      candidate.size() - us - 1 < 10) {
    base = candidate.substr(0, us);
    num = std::stol(candidate.substr(us + 1));
    candidate = base + "_" + std::to_string(num);
  }
  while (usedNames_.count(candidate) != 0 || isReservedName(candidate)) {
    ++num;
    candidate = base + "_" + std::to_string(num);
  }
  usedNames_.emplace(candidate, 0);
  return candidate;
}

void GraphBuilder::checkNoOutput(const char* what) const {
  DYNAMO_USER_CHECK(output_ == nullptr, UserErrorKind::kInvalidArgument, "cannot add a ", what,
                    " after the graph's output was set");
}

void GraphBuilder::checkArgs(const std::vector<Arg>& args, const Kwargs& kwargs) const {
  auto check = [this](const NodeRef& n) {
    DYNAMO_USER_CHECK(members_.count(n.get()) != 0, UserErrorKind::kInvalidArgument,
                      "node '", n->name(), "' does not belong to this graph builder");
  };
  for (const Arg& a : args) a.forEachNode(check);
  for (const auto& kv : kwargs) kv.second.forEachNode(check);
}

NodeRef GraphBuilder::add(NodeRef node, bool isInput) {
  members_.insert(node.get());
  usedNames_.emplace(node->name(), 0);
  (isInput ? inputs_ : body_).push_back(node);
  return node;
}

NodeRef GraphBuilder::placeholder(std::string source, NodeMeta meta, std::string nameHint) {
  checkNoOutput("placeholder");
  std::string name = uniqueName(nameHint.empty() ? source : nameHint);
  return add(Node::makePlaceholder(std::move(name), std::move(source), std::move(meta)), true);
}

NodeRef GraphBuilder::callFunction(Target target, std::vector<Arg> args, Kwargs kwargs,
                                   NodeMeta meta, std::string nameHint) {
  checkNoOutput("call_function node");
  checkArgs(args, kwargs);
  std::string name = uniqueName(nameHint.empty() ? target.shortName() : nameHint);
  return add(Node::makeCallFunction(std::move(name), std::move(target), std::move(args),
                                    std::move(kwargs), std::move(meta)),
             false);
}

NodeRef GraphBuilder::callMethod(std::string method, std::vector<Arg> args, Kwargs kwargs,
                                 NodeMeta meta, std::string nameHint) {
  checkNoOutput("call_method node");
  checkArgs(args, kwargs);
  std::string name = uniqueName(nameHint.empty() ? method : nameHint);
  return add(Node::makeCallMethod(std::move(name), std::move(method), std::move(args),
                                  std::move(kwargs), std::move(meta)),
             false);
}

void GraphBuilder::output(Arg value, NodeMeta meta) {
  checkNoOutput("second output");
  checkArgs({value}, {});
  output_ = Node::makeOutput(std::move(value), std::move(meta));
}

Graph GraphBuilder::build() const {
  DYNAMO_USER_CHECK(output_ != nullptr, UserErrorKind::kInvalidArgument,
                    "the graph has no output: call output() before build()");
  auto data = std::make_shared<Graph::Data>();
  data->inputs = inputs_;
  data->body = body_;
  data->output = output_;
  for (const NodeRef& user : body_) addUses(data->users, user);
  addUses(data->users, output_);
  return Graph(std::move(data));
}

}  // namespace dynamo::core
