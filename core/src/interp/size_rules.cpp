// Result sizes by rule: see size_rules.h and size_rules.def.
#include "size_rules.h"

#include <algorithm>
#include <unordered_map>

#include "dynamic.h"
#include "sym_values.h"
#include "torch_api.h"

namespace dynamo::core::interp {

namespace {

enum class Rule { kGetItem, kFactory, kArange, kPad, kView, kSplit, kChunk, kCat, kStack, kFlatten };

bool isNoneValue(const ValueRef& v) { return v->isConst() && v->py() == Py_None; }

// A comparison the rule needs: decided by the ranges, or by the hints and then guarded.
bool holds(CompileContext& ctx, const sym::Expr& a, sym::RelOp op, const sym::Expr& b, const char* why) {
  return ctx.shapes.evaluate(sym::rel(a, op, b), ctx.here().str(), why);
}

// Python's normalisation of a slice bound for a positive step, on a dimension of size `dim`.
sym::Expr clampBound(CompileContext& ctx, sym::Expr x, const sym::Expr& dim) {
  if (holds(ctx, x, sym::RelOp::kLt, 0, "slice bound")) {
    x = x + dim;
    return holds(ctx, x, sym::RelOp::kLt, 0, "slice bound") ? sym::Expr(0) : x;
  }
  return holds(ctx, x, sym::RelOp::kGt, dim, "slice bound") ? dim : x;
}

// The length of slice value `s` (start, stop, step) over a dimension of size `dim`.
bool sliceLength(CompileContext& ctx, const ValueRef& s, const sym::Expr& dim, sym::Expr& out) {
  if (s->items.size() != 3) return false;
  int64_t step = 1;
  if (!isNoneValue(s->items[2])) {
    sym::Expr e;
    if (!symIntExpr(s->items[2], e) || !e.isConstant() || e.constant() <= 0) return false;
    step = e.constant();
  }
  sym::Expr start(0), stop = dim;
  if (!isNoneValue(s->items[0])) {
    if (!symIntExpr(s->items[0], start)) return false;
    start = clampBound(ctx, start, dim);
  }
  if (!isNoneValue(s->items[1])) {
    if (!symIntExpr(s->items[1], stop)) return false;
    stop = clampBound(ctx, stop, dim);
  }
  sym::Expr len = holds(ctx, stop, sym::RelOp::kGt, start, "slice length") ? stop - start : sym::Expr(0);
  out = step == 1 ? len : sym::floorDiv(len + sym::Expr(step - 1), sym::Expr(step), &ctx.shapes);
  return true;
}

bool getItemSizes(CompileContext& ctx, const std::vector<ValueRef>& args, std::vector<sym::Expr>& out) {
  if (args.size() != 2 || !args[0]->isTensor()) return false;
  std::vector<ValueRef> index = args[1]->kind == ValueKind::kTuple ? args[1]->items : std::vector<ValueRef>{args[1]};
  std::vector<sym::Expr> in = sizeExprs(args[0]);
  size_t consumed = 0;
  bool ellipsis = false;
  for (const ValueRef& i : index) {
    if (i->isConst() && i->py() == Py_Ellipsis) {
      if (ellipsis) return false;
      ellipsis = true;
    } else if (!isNoneValue(i)) {
      ++consumed;
    }
  }
  if (consumed > in.size()) return false;
  size_t d = 0;
  for (const ValueRef& i : index) {
    sym::Expr e;
    if (isNoneValue(i)) {
      out.emplace_back(1);
    } else if (i->isConst() && i->py() == Py_Ellipsis) {
      for (size_t k = 0; k < in.size() - consumed; ++k) out.push_back(in[d++]);
    } else if (i->kind == ValueKind::kSlice) {
      if (!sliceLength(ctx, i, in[d++], out.emplace_back())) return false;
    } else if (i->isSymInt() || (i->isConst() && PyLong_CheckExact(i->py()))) {
      ++d;  // an int index drops the dimension (out of range raises, in eager and in the graph)
    } else {
      return false;  // bool, tensor or list indices: probed
    }
  }
  while (d < in.size()) out.push_back(in[d++]);
  return true;
}

// The int arguments giving a factory's sizes: zeros(2, n), zeros((2, n)), full((2, n), v).
bool factorySizes(const std::string& what, const std::vector<ValueRef>& args, std::vector<sym::Expr>& out) {
  if (args.empty()) return false;
  std::vector<ValueRef> dims = args;
  if (args[0]->kind == ValueKind::kTuple || args[0]->kind == ValueKind::kList) {
    if (what != "full" && args.size() != 1) return false;
    dims = args[0]->items;
  } else if (what == "full") {
    return false;
  }
  for (const ValueRef& a : dims) {
    if (!symIntExpr(a, out.emplace_back())) return false;
  }
  return true;
}

bool arangeSizes(CompileContext& ctx, const std::vector<ValueRef>& args, std::vector<sym::Expr>& out) {
  if (args.empty() || args.size() > 3) return false;
  std::vector<sym::Expr> e(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (!symIntExpr(args[i], e[i])) return false;  // float bounds: probed (and specialised)
  }
  sym::Expr start = args.size() == 1 ? sym::Expr(0) : e[0];
  sym::Expr end = args.size() == 1 ? e[0] : e[1];
  int64_t step = 1;
  if (args.size() == 3) {
    if (!e[2].isConstant() || e[2].constant() <= 0) return false;
    step = e[2].constant();
  }
  sym::Expr len = holds(ctx, end, sym::RelOp::kGt, start, "arange length") ? end - start : sym::Expr(0);
  out.push_back(step == 1 ? len : sym::floorDiv(len + sym::Expr(step - 1), sym::Expr(step), &ctx.shapes));
  return true;
}

bool padSizes(const std::vector<ValueRef>& args, const std::vector<std::pair<std::string, ValueRef>>& kwargs,
              std::vector<sym::Expr>& out) {
  ValueRef pad = args.size() >= 2 ? args[1] : nullptr;
  for (const auto& [k, v] : kwargs) {
    if (k == "pad") pad = v;
  }
  if (args.empty() || !args[0]->isTensor() || !pad || (pad->kind != ValueKind::kTuple && pad->kind != ValueKind::kList))
    return false;
  out = sizeExprs(args[0]);
  if (pad->items.size() % 2 != 0 || pad->items.size() / 2 > out.size()) return false;
  for (size_t k = 0; k < pad->items.size(); ++k) {
    sym::Expr amount;
    if (!symIntExpr(pad->items[k], amount)) return false;
    size_t d = out.size() - 1 - k / 2;  // pairs from the last dimension backwards
    out[d] = out[d] + amount;
  }
  return true;
}

// view / reshape to sizes given as ints (varargs or one tuple), at most one -1. With a -1: the
// product of the input's sizes not given, when each given size is one of the input's; otherwise
// only for a tensor whose sizes are not linear forms (padded to a multiple of 8): a linear -1 is
// found by probing, without a floor division in its expression.
bool viewSizes(CompileContext& ctx, const std::vector<ValueRef>& args, std::vector<sym::Expr>& out) {
  if (args.size() < 2 || !args[0]->isTensor()) return false;
  std::vector<ValueRef> dims(args.begin() + 1, args.end());
  if (dims.size() == 1 && (dims[0]->kind == ValueKind::kTuple || dims[0]->kind == ValueKind::kList)) {
    dims = dims[0]->items;
  } else if (dims.size() == 1 && dims[0]->isConst() && PyTuple_Check(dims[0]->py())) {  // a torch.Size constant
    PyObject* t = dims[0]->py();  // borrowed
    dims.clear();
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); ++i) dims.push_back(makeConst(PyTuple_GET_ITEM(t, i)));
  }
  std::vector<sym::Expr> in = sizeExprs(args[0]);
  sym::Expr numel(1), known(1);
  for (const sym::Expr& e : in) numel = numel * e;
  int infer = -1;
  for (size_t k = 0; k < dims.size(); ++k) {
    sym::Expr e;
    if (!symIntExpr(dims[k], e)) return false;
    if (e.isConstant() && e.constant() == -1) {
      if (infer >= 0) return false;
      infer = static_cast<int>(k);
    } else {
      known = known * e;
    }
    out.push_back(e);
  }
  if (infer < 0) return true;
  // The given sizes each one of the input's (x.view(b, -1), x.reshape(*x.shape[:2], -1)): the
  // -1 is the product of the others, exactly (b*t*c / b is t*c, a product a linear fit misses).
  std::vector<sym::Expr> rest = in;
  bool cancels = true;
  for (size_t k = 0; k < out.size() && cancels; ++k) {
    if (static_cast<int>(k) == infer) continue;
    auto it = std::find(rest.begin(), rest.end(), out[k]);
    cancels = it != rest.end();
    if (cancels) rest.erase(it);
  }
  if (cancels) {
    sym::Expr product(1);
    for (const sym::Expr& e : rest) product = product * e;
    out[static_cast<size_t>(infer)] = product;
    return true;
  }
  if (std::none_of(in.begin(), in.end(), isNonAffine)) return false;
  if (!holds(ctx, known, sym::RelOp::kNe, 0, "view size")) return false;
  out[static_cast<size_t>(infer)] = sym::floorDiv(numel, known, &ctx.shapes);
  return true;
}

// The dimension argument `k` (or keyword `keyword`) of a call, normalised against `rank`;
// `fallback` when absent; -1 when not a constant or out of range.
int dimArg(const std::vector<ValueRef>& args, const std::vector<std::pair<std::string, ValueRef>>& kwargs, size_t k,
           int64_t rank, int64_t fallback, const char* keyword = "dim") {
  ValueRef v = args.size() > k ? args[k] : nullptr;
  for (const auto& [name, value] : kwargs) {
    if (name == keyword) v = value;
  }
  int64_t d = fallback;
  if (v) {
    if (!v->isConst() || !PyLong_CheckExact(v->py())) return -1;
    d = PyLong_AsLongLong(v->py());
  }
  if (d < 0) d += rank;
  return d >= 0 && d < rank ? static_cast<int>(d) : -1;
}

// Tensor.split(size, dim) / Tensor.chunk(chunks, dim): pieces of `step` along `dim`, the last
// one the rest; their number (what the trace made) guarded.
bool splitSizes(CompileContext& ctx, bool chunk, const std::vector<ValueRef>& args,
                const std::vector<std::pair<std::string, ValueRef>>& kwargs, size_t pieces,
                std::vector<std::vector<sym::Expr>>& out) {
  if (args.size() < 2 || !args[0]->isTensor() || pieces == 0) return false;
  std::vector<sym::Expr> in = sizeExprs(args[0]);
  int dim = dimArg(args, kwargs, 2, static_cast<int64_t>(in.size()), 0);
  sym::Expr n;
  if (dim < 0 || !symIntExpr(args[1], n)) return false;  // a list of sections: probed
  const sym::Expr& size = in[static_cast<size_t>(dim)];
  if (!holds(ctx, n, sym::RelOp::kGt, 0, chunk ? "chunk count" : "split size")) return false;
  sym::Expr step = chunk ? sym::floorDiv(size + n - sym::Expr(1), n, &ctx.shapes) : n;
  if (!holds(ctx, step, sym::RelOp::kGt, 0, "split size")) return false;
  sym::Expr count = sym::floorDiv(size + step - sym::Expr(1), step, &ctx.shapes);
  if (!holds(ctx, count, sym::RelOp::kEq, static_cast<int64_t>(pieces), "number of pieces")) return false;
  for (size_t p = 0; p < pieces; ++p) {
    out.push_back(in);
    out.back()[static_cast<size_t>(dim)] =
        p + 1 < pieces ? step : size - sym::Expr(static_cast<int64_t>(pieces - 1)) * step;
  }
  return true;
}

// torch.cat(tensors, dim): the sizes of the first, the sum along dim (torch's legacy empty 1-d
// tensors are skipped, as cat skips them); torch.stack(tensors, dim): a new dim of their number.
bool catSizes(bool stack, const std::vector<ValueRef>& args, const std::vector<std::pair<std::string, ValueRef>>& kwargs,
              std::vector<sym::Expr>& out) {
  if (args.empty() || (args[0]->kind != ValueKind::kTuple && args[0]->kind != ValueKind::kList)) return false;
  std::vector<std::vector<sym::Expr>> parts;
  for (const ValueRef& t : args[0]->items) {
    if (!t->isTensor()) return false;
    std::vector<sym::Expr> e = sizeExprs(t);
    if (!stack && e.size() == 1 && e[0].isConstant() && e[0].constant() == 0) continue;
    parts.push_back(std::move(e));
  }
  if (parts.empty()) return false;
  int64_t rank = static_cast<int64_t>(parts[0].size()) + (stack ? 1 : 0);
  int dim = dimArg(args, kwargs, 1, rank, 0);
  if (dim < 0) return false;
  for (const auto& p : parts) {
    if (p.size() != parts[0].size()) return false;
  }
  out = parts[0];
  if (stack) {
    out.insert(out.begin() + dim, sym::Expr(static_cast<int64_t>(parts.size())));
    return true;
  }
  for (size_t k = 1; k < parts.size(); ++k) out[static_cast<size_t>(dim)] = out[static_cast<size_t>(dim)] + parts[k][static_cast<size_t>(dim)];
  return true;
}

// flatten(x, start_dim, end_dim): the product of the merged sizes.
bool flattenSizes(const std::vector<ValueRef>& args, const std::vector<std::pair<std::string, ValueRef>>& kwargs,
                  std::vector<sym::Expr>& out) {
  if (args.empty() || !args[0]->isTensor()) return false;
  std::vector<sym::Expr> in = sizeExprs(args[0]);
  if (in.empty()) return false;
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t start = dimArg(args, kwargs, 1, rank, 0, "start_dim"), end = dimArg(args, kwargs, 2, rank, -1, "end_dim");
  if (start < 0 || end < start) return false;
  out.assign(in.begin(), in.begin() + start);
  sym::Expr merged(1);
  for (int64_t d = start; d <= end; ++d) merged = merged * in[static_cast<size_t>(d)];
  out.push_back(merged);
  out.insert(out.end(), in.begin() + end + 1, in.end());
  return true;
}

}  // namespace

bool isNonAffine(const sym::Expr& e) {
  for (const sym::Term& t : e.rep().terms) {
    if (t.factors.size() != 1 || t.factors[0]->kind != sym::Atom::Kind::kSymbol) return true;
  }
  return false;
}

std::vector<sym::Expr> sizeExprs(const ValueRef& tensor) {
  const std::vector<sym::Expr>& s = tensor->as<TensorData>().symSizes;
  if (!s.empty()) return s;
  std::vector<sym::Expr> out;
  for (int64_t v : sizesOf(tensor->obj.get())) out.emplace_back(v);
  return out;
}

bool sizesByRule(CompileContext& ctx, const std::string& what, const std::vector<ValueRef>& args,
                 const std::vector<std::pair<std::string, ValueRef>>& kwargs, const std::vector<ValueRef>& outs) {
  static const std::unordered_map<std::string, Rule> kRules = {
#define DYNAMO_SIZE_RULE(function, rule) {function, Rule::rule},
#include "size_rules.def"
  };
  auto it = kRules.find(what);
  if (it == kRules.end() || outs.empty()) return false;
  for (const ValueRef& o : outs) {
    if (!o->isTensor()) return false;
  }
  std::vector<std::vector<sym::Expr>> sizes(1);
  bool ok = false;
  try {
    switch (it->second) {
      case Rule::kGetItem: ok = getItemSizes(ctx, args, sizes[0]); break;
      case Rule::kFactory: ok = factorySizes(what, args, sizes[0]); break;
      case Rule::kArange: ok = arangeSizes(ctx, args, sizes[0]); break;
      case Rule::kPad: ok = padSizes(args, kwargs, sizes[0]); break;
      case Rule::kView: ok = viewSizes(ctx, args, sizes[0]); break;
      case Rule::kCat:
      case Rule::kStack: ok = catSizes(it->second == Rule::kStack, args, kwargs, sizes[0]); break;
      case Rule::kFlatten: ok = flattenSizes(args, kwargs, sizes[0]); break;
      case Rule::kSplit:
      case Rule::kChunk:
        sizes.clear();
        ok = splitSizes(ctx, it->second == Rule::kChunk, args, kwargs, outs.size(), sizes);
        break;
    }
  } catch (const sym::SymbolicError&) {
    return false;
  }
  // The rule must give the traced sizes exactly (else it does not fit this call: probe).
  if (!ok || sizes.size() != outs.size()) return false;
  std::vector<bool> symbolic(outs.size(), false);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::vector<int64_t> traced = sizesOf(outs[i]->obj.get());
    if (sizes[i].size() != traced.size()) return false;
    for (size_t d = 0; d < traced.size(); ++d) {
      if (ctx.shapes.evalHint(sizes[i][d]) != traced[d]) return false;
      for (int id : sizes[i][d].symbols()) symbolic[i] = symbolic[i] || !ctx.shapes.pinned(id);
    }
  }
  for (size_t i = 0; i < outs.size(); ++i) outs[i]->as<TensorData>().symSizes = symbolic[i] ? sizes[i] : std::vector<sym::Expr>{};
  return true;
}

}  // namespace dynamo::core::interp
