// Symbolic Python ints in the tracer (see sym_values.h): int inputs as graph inputs, their
// arithmetic as graph nodes, comparisons as guarded constants, specialisation where a value is
// needed.
#include "sym_values.h"

#include <algorithm>

#include "dynamic.h"
#include "torch_api.h"

namespace dynamo::core::interp {

namespace {

ValueRef makeSymInt(CompileContext& ctx, sym::Expr e, NodeRef node) {
  auto v = std::make_shared<Value>();
  v->kind = ValueKind::kSymInt;
  v->obj = PyObjectRef::steal(checkPy(PyLong_FromLongLong(ctx.shapes.evalHint(e))));
  v->symInt = std::move(e);
  v->node = std::move(node);
  ++ctx.symIntsMade;
  return v;
}

// The expression of a kSymInt or of an exact int constant that fits in 64 bits.
bool exprOf(const ValueRef& v, sym::Expr& out) {
  if (v->isSymInt()) {
    out = v->symInt;
    return true;
  }
  if (!v->isConst() || !PyLong_CheckExact(v->py())) return false;
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v->py(), &overflow);
  if (overflow || PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  out = sym::Expr(static_cast<int64_t>(x));
  return true;
}

bool comparison(const std::string& name, sym::RelOp& op) {
  static const std::pair<const char*, sym::RelOp> kOps[] = {{"lt", sym::RelOp::kLt}, {"le", sym::RelOp::kLe},
                                                            {"eq", sym::RelOp::kEq}, {"ne", sym::RelOp::kNe},
                                                            {"gt", sym::RelOp::kGt}, {"ge", sym::RelOp::kGe}};
  for (const auto& [n, o] : kOps) {
    if (name == n) {
      op = o;
      return true;
    }
  }
  return false;
}

}  // namespace

ValueRef wrapSymIntInput(CompileContext& ctx, PyObject* obj, const Source& source) {
  if (!ctx.options.dynamic || !ctx.options.symbolicInts || !source) return nullptr;
  auto memo = ctx.symIntInputs.find(source);
  if (memo != ctx.symIntInputs.end()) return memo->second;
  int overflow = 0;
  long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow || PyErr_Occurred()) {
    PyErr_Clear();
    return nullptr;
  }
  std::string why;
  if (!ctx.options.dynamic->planInt(source.name(), value, why)) {
    if (!why.empty() &&
        std::find(ctx.dynamicNotes.begin(), ctx.dynamicNotes.end(), why) == ctx.dynamicNotes.end())
      ctx.dynamicNotes.push_back(why);
    return nullptr;
  }
  sym::SymbolSource where{static_cast<int>(ctx.inputs().size()), -1, source.name()};
  sym::Expr e = ctx.shapes.sizeSymbol(value, where, /*duck=*/false, sym::Range{2, sym::kInf});
  ctx.symbolSources.emplace_back();
  ctx.symbolSources.back().emplace_back(source, -1);
  // Its type here; its value by the entry's shape guards (range and relations).
  ctx.guard(source, makeTypeMatch(obj));
  NodeRef node = ctx.addScalarInput(obj, source);
  ValueRef v = makeSymInt(ctx, e, node);
  v->source = source;
  ctx.symIntInputs.emplace(source, v);
  ctx.dynamicNotes.push_back(source.name() + " is dynamic (" + ctx.shapes.symbolName(e.symbolId()) + "): " + why);
  return v;
}

ValueRef symbolicSize(CompileContext& ctx, const ValueRef& tensor, int64_t dim) {
  if (!ctx.options.dynamic || !ctx.options.symbolicInts || !tensor->isTensor() || tensor->symSizes.empty()) return nullptr;
  int64_t n = static_cast<int64_t>(tensor->symSizes.size());
  if (dim < -n || dim >= n) return nullptr;
  if (dim < 0) dim += n;
  const sym::Expr& e = tensor->symSizes[static_cast<size_t>(dim)];
  bool free = false;
  for (int id : e.symbols()) free = free || !ctx.shapes.pinned(id);
  if (!free) return makeConst(PyObjectRef::steal(checkPy(PyLong_FromLongLong(ctx.shapes.evalHint(e)))).get());
  NodeRef node = ctx.graph.callMethod("size", {Arg::node(tensor->node), Arg::integer(dim)}, {}, ctx.metaHere(nullptr));
  return makeSymInt(ctx, e, node);
}

bool anySymInt(const std::vector<ValueRef>& args) {
  return std::any_of(args.begin(), args.end(), [](const ValueRef& a) { return a->isSymInt(); });
}

ValueRef symIntOperator(CompileContext& ctx, const std::string& name, const std::vector<ValueRef>& args) {
  std::vector<sym::Expr> e(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (!exprOf(args[i], e[i])) return nullptr;
  }
  sym::RelOp op;
  try {
    if (args.size() == 2 && comparison(name, op)) {
      bool r = ctx.shapes.evaluate(sym::rel(e[0], op, e[1]), ctx.here().str(), "comparison");
      return makeConst(r ? Py_True : Py_False);
    }
    sym::Expr out;
    if (args.size() == 1 && name == "neg") {
      out = -e[0];
    } else if (args.size() == 1 && name == "pos") {
      out = e[0];
    } else if (args.size() == 2 && name == "add") {
      out = e[0] + e[1];
    } else if (args.size() == 2 && name == "sub") {
      out = e[0] - e[1];
    } else if (args.size() == 2 && name == "mul") {
      out = e[0] * e[1];
    } else if (args.size() == 2 && (name == "floordiv" || name == "mod")) {
      // A divisor that may be 0 raises in Python: leave that to the value (specialised).
      std::optional<bool> nonzero = sym::decide(sym::rel(e[1], sym::RelOp::kNe, 0), ctx.shapes.ranges());
      if (!nonzero.value_or(false)) return nullptr;
      out = name == "floordiv" ? sym::floorDiv(e[0], e[1], &ctx.shapes) : sym::mod(e[0], e[1], &ctx.shapes);
    } else {
      return nullptr;
    }
    if (out.isConstant()) return makeConst(PyObjectRef::steal(checkPy(PyLong_FromLongLong(out.constant()))).get());
    PyObjectRef fn = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().operatorModule, name.c_str())));
    std::vector<Arg> gargs;
    for (const ValueRef& a : args) gargs.push_back(argOf(ctx, a));
    NodeRef node = ctx.graph.callFunction(Target::fromCallable(fn.get()), std::move(gargs), {}, ctx.metaHere(nullptr));
    return makeSymInt(ctx, out, node);
  } catch (const sym::SymbolicError&) {
    return nullptr;  // overflow: the caller specialises
  }
}

bool symIntTruth(CompileContext& ctx, const ValueRef& v) {
  return ctx.shapes.evaluate(sym::rel(v->symInt, sym::RelOp::kNe, 0), ctx.here().str(), "truth value");
}

int64_t specializeSymInt(CompileContext& ctx, const ValueRef& v, const std::string& why) {
  std::vector<int> ids;
  for (int id : v->symInt.symbols()) {
    if (!ctx.shapes.pinned(id)) ids.push_back(id);
  }
  specializeSymbols(ctx, ids, why);
  return ctx.shapes.evalHint(v->symInt);
}

}  // namespace dynamo::core::interp
