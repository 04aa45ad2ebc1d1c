// Dead-code elimination (passes.def): drops call nodes whose results nobody uses, but only when
// running them could have no effect at all. A node stays when it
//   - is random (it advances the generator the rest of the program sees),
//   - mutates (in-place methods, setitem, set_grad_enabled: they return None or their input),
//   - may raise on some input the guards admit (x[idx] with a tensor index, integer division,
//     reductions of possibly empty tensors, device moves): an unused x[idx] still raises as in
//     eager.
// Each removed node is one application (PassContext::apply), numbered in the backward walk.
// What may go is listed below by op key (Node::opKey()): ops whose success on the meta example
// means success on every input with the same guarded sizes, dtypes and devices, and only when
// the tensors they read share one dtype.
#include <set>
#include <string>
#include <unordered_set>

#include "dynamo/core/passes.h"

namespace dynamo::core {
namespace {

bool removableOp(const std::string& key) {
  static const std::set<std::string> kPure = [] {
    std::set<std::string> s;
    // operator.* on tensors (floordiv and mod may divide integers by zero; getitem may index out
    // of range: not here).
    for (const char* op : {"add", "sub", "mul", "truediv", "neg", "pos", "matmul", "lt", "le", "gt",
                           "ge", "eq", "ne", "and_", "or_", "xor", "invert"})
      s.insert(std::string("operator.") + op);
    // Pure elementwise and view functions, as torch functions, Tensor methods and F functions.
    for (const char* fn : {"relu", "sigmoid", "tanh", "sin", "cos", "exp", "log", "sqrt", "rsqrt",
                           "abs", "neg", "reciprocal", "square", "t", "transpose", "permute", "view",
                           "reshape", "flatten", "unsqueeze", "squeeze", "contiguous", "clone",
                           "detach", "expand", "expand_as", "view_as", "float", "double", "half",
                           "add", "sub", "mul", "div", "matmul", "mm", "bmm", "sum", "mean",
                           "softmax", "log_softmax", "gelu", "silu", "sign", "floor", "ceil",
                           "round", "clamp", "minimum", "maximum", "where", "cat", "stack"}) {
      s.insert(std::string("torch.") + fn);
      s.insert(std::string("torch.Tensor.") + fn);
    }
    // Not torch.nn.functional: F.relu(x, True) and friends work in place and return their input.
    return s;
  }();
  return kPure.count(key) > 0;
}

// Whether the tensors a node reads have more than one dtype. A meta example does not show
// that such a call succeeds: torch 1.13's meta kernels of mm and friends do not compare dtypes,
// so an unused bfloat16 @ float32 traced fine, was removed, and eager's error was lost. Mixed
// dtypes keep the node (promoting ops only lose the removal).
bool readsMixedDtypes(const Node& n) {
  const std::string* first = nullptr;
  bool mixed = false;
  n.forEachInput([&](const NodeRef& in) {
    const auto& t = in->meta().tensor;
    if (!t) return;
    if (first == nullptr) first = &t->dtype;
    else if (*first != t->dtype) mixed = true;
  });
  return mixed;
}

}  // namespace

Graph runDeadCodeElimination(const Graph& graph, PassContext& ctx) {
  const auto& body = graph.body();
  std::unordered_set<const Node*> dead;
  // Walk backwards: a node is dead when every user is dead (or it has none) and it may go.
  for (auto it = body.rbegin(); it != body.rend(); ++it) {
    const NodeRef& n = *it;
    if (!removableOp(n->opKey()) || readsMixedDtypes(*n)) continue;
    bool writes = false;  // torch.add(a, b, out=c) writes c
    for (const auto& kv : n->kwargs()) writes = writes || kv.first == "out" || kv.first == "inplace";
    if (writes) continue;
    bool used = false;
    for (const NodeRef& u : graph.users(n))
      if (!dead.count(u.get())) used = true;
    if (!used && ctx.apply(n)) dead.insert(n.get());
  }
  if (dead.empty()) return graph;
  GraphRewriter rewriter(graph);
  for (const NodeRef& n : body)
    if (!dead.count(n.get())) rewriter.copy(n);
  return rewriter.finish();
}

}  // namespace dynamo::core
