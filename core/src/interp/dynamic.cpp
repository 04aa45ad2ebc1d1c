// Dynamic shapes in the tracer (see dynamic.h): the per-code policy, input symbols, result sizes
// by probing meta kernels, and specialisation.
#include "dynamic.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "codegen.h"
#include "dynamo/core/passes.h"
#include "size_rules.h"
#include "sym_values.h"
#include "torch_api.h"

namespace dynamo::core::interp {

std::vector<int64_t> sizesOf(PyObject* t) {
  PyObjectRef shape = PyObjectRef::steal(checkPy(PyObject_GetAttrString(t, "shape")));
  std::vector<int64_t> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape.get()); ++i) out.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), i)));
  return out;
}

namespace {

std::vector<int64_t> stridesOf(PyObject* t) {
  PyObjectRef st = PyObjectRef::steal(checkPy(PyObject_CallMethod(t, "stride", nullptr)));
  std::vector<int64_t> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(st.get()); ++i) out.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(st.get(), i)));
  return out;
}

bool isContiguousExactly(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t step = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (strides[i] != step) return false;
    step *= std::max<int64_t>(sizes[i], 1);
  }
  return true;
}

bool strided(PyObject* t) {
  PyObjectRef layout = PyObjectRef::steal(PyObject_GetAttrString(t, "layout"));
  PyObjectRef text = layout ? PyObjectRef::steal(PyObject_Str(layout.get())) : PyObjectRef{};
  PyErr_Clear();
  return text && std::string(PyUnicode_AsUTF8(text.get())) == "torch.strided";
}

// {dim: (min, max)} from mark_dynamic, or {} (borrowed attribute read).
std::map<int, sym::Range> markedDynamic(PyObject* t) {
  std::map<int, sym::Range> out;
  PyObjectRef d = PyObjectRef::steal(PyObject_GetAttrString(t, "_dynamo_dynamic_dims"));
  if (!d || !PyDict_Check(d.get())) {
    PyErr_Clear();
    return out;
  }
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(d.get(), &pos, &k, &v)) {
    sym::Range r{2, sym::kInf};
    if (PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2) {
      if (PyTuple_GET_ITEM(v, 0) != Py_None) r.lo = std::max<int64_t>(2, PyLong_AsLongLong(PyTuple_GET_ITEM(v, 0)));
      if (PyTuple_GET_ITEM(v, 1) != Py_None) r.hi = PyLong_AsLongLong(PyTuple_GET_ITEM(v, 1));
    }
    out[static_cast<int>(PyLong_AsLong(k))] = r;
  }
  PyErr_Clear();
  return out;
}

std::set<int> markedStatic(PyObject* t) {
  std::set<int> out;
  PyObjectRef s = PyObjectRef::steal(PyObject_GetAttrString(t, "_dynamo_static_dims"));
  if (!s || !PyAnySet_Check(s.get())) {
    PyErr_Clear();
    return out;
  }
  PyObjectRef it = PyObjectRef::steal(PyObject_GetIter(s.get()));
  while (PyObject* item = it ? PyIter_Next(it.get()) : nullptr) {
    out.insert(static_cast<int>(PyLong_AsLong(item)));
    Py_DECREF(item);
  }
  PyErr_Clear();
  return out;
}

}  // namespace

std::vector<DynamicState::DimPlan> DynamicState::plan(const std::string& source, PyObject* tensor) {
  std::vector<int64_t> sizes = sizesOf(tensor);
  std::vector<DimPlan> out(sizes.size());
  std::map<int, sym::Range> marked = markedDynamic(tensor);
  std::set<int> fixed = markedStatic(tensor);
  auto prev = seen_.find(source);
  std::set<int>& changed = changed_[source];
  if (prev != seen_.end() && prev->second.size() == sizes.size()) {
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (prev->second[d] != sizes[d]) changed.insert(static_cast<int>(d));
    }
  }
  bool dense = strided(tensor) && isContiguousExactly(sizes, stridesOf(tensor));
  int isParam = PyObject_IsInstance(tensor, torchApi().parameterType);
  if (isParam < 0) PyErr_Clear();
  bool parameter = isParam == 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    DimPlan& p = out[d];
    int dim = static_cast<int>(d);
    std::string name = source + ".size()[" + std::to_string(d) + "]";
    bool want = false;
    if (mode_ == DynamicMode::kOff) continue;
    if (fixed.count(dim)) continue;  // mark_static
    auto m = marked.find(dim);
    if (m != marked.end()) {
      want = true;
      p.range = m->second;
      p.duck = false;
      p.why = "mark_dynamic";
    } else if (static_.count({source, dim})) {
      continue;  // specialised by an earlier trace: automatic dynamic does not apply
    } else if (mode_ == DynamicMode::kAll && parameter) {
      continue;  // as PyTorch: a parameter's sizes are constants (no duck sizing with the batch)
    } else if (mode_ == DynamicMode::kAll) {
      want = true;
      p.why = "dynamic=True";
    } else if (automatic_ && changed.count(dim)) {
      want = true;
      p.why = "automatic dynamic: the size changed" +
              (prev != seen_.end() ? " (" + std::to_string(prev->second[d]) + " -> " + std::to_string(sizes[d]) + ")" : std::string());
    }
    if (!want) continue;
    if (sizes[d] == 0 || sizes[d] == 1) {
      p.why = name + " is " + std::to_string(sizes[d]) + ": sizes 0 and 1 are specialised (" + p.why + " not applied)";
      continue;
    }
    if (!p.range.contains(sizes[d])) {
      p.why = name + " is " + std::to_string(sizes[d]) + ", outside its mark_dynamic range " + p.range.str() + ": specialised";
      continue;
    }
    if (!dense) {
      p.why = name + " stays static: the tensor is not contiguous (" + p.why + " not applied)";
      continue;
    }
    p.dynamic = true;
  }
  seen_[source] = sizes;
  return out;
}

void DynamicState::keepStatic(const std::string& source, int dim, const std::string& why) {
  static_.emplace(std::make_pair(source, dim), why);
}

bool DynamicState::planInt(const std::string& source, int64_t value, std::string& why) {
  auto prev = seenInts_.find(source);
  bool changed = prev != seenInts_.end() && prev->second != value;
  if (changed) lastChange_[source] = " (" + std::to_string(prev->second) + " -> " + std::to_string(value) + ")";
  std::string from = lastChange_.count(source) ? lastChange_[source] : "";
  if (changed) changedInts_.insert(source);
  seenInts_[source] = value;
  if (mode_ == DynamicMode::kOff || static_.count({source, -1})) return false;
  // dynamic=True makes every *size* dynamic; an int is symbolic once it changed (as automatic).
  if ((automatic_ || mode_ == DynamicMode::kAll) && changedInts_.count(source)) {
    why = "automatic dynamic: the value changed" + from;
  } else {
    return false;
  }
  if (value < 2) {
    why = source + " is " + std::to_string(value) + ": ints below 2 stay constants (" + why + " not applied)";
    return false;
  }
  return true;
}

bool DynamicState::planFloat(const std::string& source, double value, std::string& why) {
  auto prev = seenFloats_.find(source);
  bool changed = prev != seenFloats_.end() && std::memcmp(&prev->second, &value, sizeof value) != 0;
  if (changed) {
    changedFloats_.insert(source);
    PyObjectRef a = PyObjectRef::steal(PyFloat_FromDouble(prev->second)), b = PyObjectRef::steal(PyFloat_FromDouble(value));
    PyObjectRef ra = PyObjectRef::steal(a ? PyObject_Repr(a.get()) : nullptr), rb = PyObjectRef::steal(b ? PyObject_Repr(b.get()) : nullptr);
    if (ra && rb) lastChange_[source] = std::string(" (") + PyUnicode_AsUTF8(ra.get()) + " -> " + PyUnicode_AsUTF8(rb.get()) + ")";
    PyErr_Clear();
  }
  std::string from = lastChange_.count(source) ? lastChange_[source] : "";
  seenFloats_[source] = value;
  if (mode_ == DynamicMode::kOff || static_.count({source, -1})) return false;
  if ((automatic_ || mode_ == DynamicMode::kAll) && changedFloats_.count(source)) {
    why = "automatic dynamic: the value changed" + from;
    return true;
  }
  return false;
}

std::shared_ptr<DynamicState> DynamicRegistry::forCode(PyCodeObject* code, DynamicMode mode, bool automatic) {
  if (const ResumeInfo* info = resumeInfo(code)) {
    std::string key = std::string(PyUnicode_AsUTF8(code->co_qualname)) + "@" + info->breakAt.str();
    auto& slot = resumeStates_[{info->rootCode.get(), key}];
    if (!slot.second) slot = {info->rootCode, std::make_shared<DynamicState>(mode, automatic)};
    return slot.second;
  }
  PyObject* key = reinterpret_cast<PyObject*>(code);
  auto it = states_.find(key);
  if (it != states_.end()) return it->second.second;
  auto state = std::make_shared<DynamicState>(mode, automatic);
  states_.emplace(key, std::make_pair(PyObjectRef::borrow(key), state));
  return state;
}

std::vector<bool> makeInputSymbols(CompileContext& ctx, const ValueRef& v, PyObject* tensor, const Source& source) {
  if (!ctx.options.dynamic) return {};
  std::vector<DynamicState::DimPlan> plan = ctx.options.dynamic->plan(source.name(), tensor);
  std::vector<bool> mask(plan.size(), false);
  bool any = false;
  for (const auto& p : plan) any = any || p.dynamic;
  for (const auto& p : plan) {
    if (!p.dynamic && !p.why.empty()) ctx.dynamicNotes.push_back(p.why);
  }
  if (!any) return {};
  std::vector<int64_t> sizes = sizesOf(tensor);
  for (size_t d = 0; d < plan.size(); ++d) {
    if (!plan[d].dynamic) {
      v->as<TensorData>().symSizes.emplace_back(sizes[d]);
      continue;
    }
    std::string name = source.name() + ".size()[" + std::to_string(d) + "]";
    int before = ctx.shapes.numSymbols();
    sym::Expr e = ctx.shapes.sizeSymbol(sizes[d], sym::SymbolSource{static_cast<int>(ctx.inputs().size()), static_cast<int>(d), name},
                                        plan[d].duck && !ctx.options.noDuck.count({source.name(), static_cast<int>(d)}),
                                        plan[d].range);
    int id = e.symbolId();
    if (id >= before) ctx.symbolSources.emplace_back();
    ctx.symbolSources.at(id).emplace_back(source, static_cast<int>(d));
    ctx.dynamicNotes.push_back(name + " is dynamic (" + ctx.shapes.symbolName(id) + "): " + plan[d].why);
    v->as<TensorData>().symSizes.push_back(e);
    mask[d] = true;
  }
  return mask;
}

namespace {

void collectTensors(const ValueRef& v, std::vector<ValueRef>& out) {
  if (!v) return;
  if (v->isTensor()) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    return;
  }
  for (const ValueRef& i : v->items) collectTensors(i, out);
}

void collectSymInts(const ValueRef& v, std::vector<ValueRef>& out) {
  if (!v) return;
  if (v->isSymInt()) {
    out.push_back(v);
    return;
  }
  if (v->isTensor()) return;
  for (const ValueRef& i : v->items) collectSymInts(i, out);
}

// The unpinned symbols of the tensors' sizes and of the symbolic ints.
std::vector<int> freeSymbols(const CompileContext& ctx, const std::vector<ValueRef>& tensors,
                             const std::vector<ValueRef>& ints = {}) {
  std::set<int> ids;
  auto add = [&](const sym::Expr& e) {
    for (int id : e.symbols()) {
      if (!ctx.shapes.pinned(id)) ids.insert(id);
    }
  };
  for (const ValueRef& t : tensors) {
    for (const sym::Expr& e : t->as<TensorData>().symSizes) add(e);
  }
  for (const ValueRef& i : ints) add(i->as<SymIntData>().expr);
  return {ids.begin(), ids.end()};
}

// A leaf of a call's result: a tensor's sizes, or a Python value.
struct Leaf {
  bool tensor = false;
  std::vector<int64_t> sizes;
  PyObjectRef value;
};

void flattenResult(PyObject* o, std::vector<Leaf>& out) {
  if (isTensor(o)) {
    out.push_back(Leaf{true, sizesOf(o), {}});
  } else if (PyTuple_Check(o) || PyList_Check(o)) {
    for (Py_ssize_t i = 0; i < PySequence_Size(o); ++i) {
      PyObjectRef item = PyObjectRef::steal(checkPy(PySequence_GetItem(o, i)));
      flattenResult(item.get(), out);
    }
  } else {
    out.push_back(Leaf{false, {}, PyObjectRef::borrow(o)});
  }
}

// Strides for `sizes` with the example's gaps: each stride the same multiple of the extent of the
// dimensions inside it as in the example (q, k, v = qkv.split(c, -1) are [b, t, c] views of a
// [b, t, 3c] tensor: at another t, q's strides are [3ct, 3c, 1] again), or else with the same gap
// after it (a [2, 4] piece of a [2, 9] tensor); broadcast dimensions (stride 0) stay 0. False when
// the dimensions overlap.
bool gappedStrides(const std::vector<int64_t>& exSizes, const std::vector<int64_t>& exStrides, const std::vector<size_t>& order,
                   const std::vector<int64_t>& sizes, std::vector<int64_t>& strides) {
  int64_t exExtent = 1, extent = 1;
  for (size_t k = order.size(); k-- > 0;) {
    size_t d = order[k];
    if (exStrides[d] == 0 || exSizes[d] == 1) {
      strides[d] = exStrides[d] == 0 ? 0 : extent;
      if (sizes[d] != exSizes[d] && exStrides[d] != 0) return false;
      continue;
    }
    if (exStrides[d] < exExtent) return false;
    // the same multiple, or where it is none (a piece of an odd length) the same gap
    strides[d] = exStrides[d] % exExtent == 0 ? exStrides[d] / exExtent * extent : exStrides[d] - exExtent + extent;
    exExtent = exStrides[d] * exSizes[d];
    extent = strides[d] * sizes[d];
  }
  return true;
}

// A meta tensor like `example` (same dtype and dense layout order) with sizes `sizes`; null when
// the example's layout is not dense (its strides then do not follow from the sizes).
PyObjectRef probeTensor(PyObject* example, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> exSizes = sizesOf(example), exStrides = stridesOf(example);
  size_t n = exSizes.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return exStrides[a] > exStrides[b]; });
  // Dense: walking dims from the innermost, each stride is the product of the inner sizes.
  int64_t step = 1;
  bool dense = true;
  for (size_t k = n; k-- > 0;) {
    size_t d = order[k];
    if (exSizes[d] != 1 && exStrides[d] != step) dense = false;
    step *= std::max<int64_t>(exSizes[d], 1);
  }
  std::vector<int64_t> strides(n);
  if (dense) {
    step = 1;
    for (size_t k = n; k-- > 0;) {
      strides[order[k]] = step;
      step *= std::max<int64_t>(sizes[order[k]], 1);
    }
  } else if (!gappedStrides(exSizes, exStrides, order, sizes, strides)) {
    // Not dense (a slice x[:, :3]): its strides stay as they are when only its outermost
    // dimension changes size (the inner layout then does not depend on it).
    for (size_t k = 1; k < n; ++k) {
      if (sizes[order[k]] != exSizes[order[k]]) return {};
    }
    strides = exStrides;
  }
  PyObjectRef sz = PyObjectRef::steal(checkPy(PyTuple_New(n)));
  PyObjectRef st = PyObjectRef::steal(checkPy(PyTuple_New(n)));
  for (size_t i = 0; i < n; ++i) {
    PyTuple_SET_ITEM(sz.get(), i, PyLong_FromLongLong(sizes[i]));
    PyTuple_SET_ITEM(st.get(), i, PyLong_FromLongLong(strides[i]));
  }
  PyObjectRef dtype = PyObjectRef::steal(checkPy(PyObject_GetAttrString(example, "dtype")));
  PyObjectRef args = PyObjectRef::steal(checkPy(PyTuple_Pack(2, sz.get(), st.get())));
  PyObjectRef kw = PyObjectRef::steal(checkPy(PyDict_New()));
  PyDict_SetItemString(kw.get(), "dtype", dtype.get());
  PyDict_SetItemString(kw.get(), "device", torchApi().metaDevice);
  PyObject* t = PyObject_Call(torchApi().emptyStrided, args.get(), kw.get());
  if (t == nullptr) PyErr_Clear();
  return PyObjectRef::steal(t);
}

// Runs the call on meta tensors whose symbolic sizes take `values`; false when it cannot.
bool probe(CompileContext& ctx, PyObject* fn, const std::string& method, const std::vector<ValueRef>& args,
           const std::vector<std::pair<std::string, ValueRef>>& kwargs, const std::vector<ValueRef>& tensors,
           const std::vector<int64_t>& values, std::vector<Leaf>& out) {
  // Swap each dynamic tensor's example for a probe, build the call's examples, swap back.
  std::vector<PyObjectRef> saved;
  bool ok = true;
  for (const ValueRef& t : tensors) {
    saved.push_back(t->obj);
    if (t->as<TensorData>().symSizes.empty()) continue;
    std::vector<int64_t> sizes;
    try {
      for (const sym::Expr& e : t->as<TensorData>().symSizes) sizes.push_back(e.eval(values));
    } catch (const sym::SymbolicError&) {
      ok = false;
      break;
    }
    for (int64_t s : sizes) ok = ok && s >= 0;
    PyObjectRef p = ok ? probeTensor(t->obj.get(), sizes) : PyObjectRef{};
    if (!p) {
      ok = false;
      break;
    }
    t->obj = p;
  }
  PyObjectRef exArgs, exKwargs;
  if (ok) {
    ctx.probeValues = &values;  // symbolic ints evaluate at the probe point
    try {
      exArgs = PyObjectRef::steal(checkPy(PyTuple_New(args.size())));
      for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(exArgs.get(), i, exampleOf(ctx, args[i]).release());
      exKwargs = PyObjectRef::steal(checkPy(PyDict_New()));
      for (const auto& [k, v] : kwargs) {
        PyObjectRef ex = k == "device" ? PyObjectRef::borrow(torchApi().metaDevice) : exampleOf(ctx, v);
        PyDict_SetItemString(exKwargs.get(), k.c_str(), ex.get());
      }
    } catch (...) {
      PyErr_Clear();
      ok = false;
    }
    ctx.probeValues = nullptr;
  }
  // In reverse: a tensor met twice (x + x) saved its probe the second time.
  for (size_t i = saved.size(); i-- > 0;) tensors[i]->obj = saved[i];
  if (!ok) return false;
  PyObjectRef callable, callArgs = exArgs;
  if (!method.empty()) {
    if (args.empty()) return false;
    callable = PyObjectRef::steal(PyObject_GetAttrString(PyTuple_GET_ITEM(exArgs.get(), 0), method.c_str()));
    callArgs = PyObjectRef::steal(PyTuple_GetSlice(exArgs.get(), 1, args.size()));
    if (!callable || !callArgs) {
      PyErr_Clear();
      return false;
    }
  } else {
    callable = PyObjectRef::borrow(fn);
  }
  const TorchApi& api = torchApi();
  PyObjectRef prevGrad = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(api.isGradEnabled)));
  PyObjectRef set = PyObjectRef::steal(PyObject_CallFunctionObjArgs(api.setGradEnabled, ctx.gradEnabled ? Py_True : Py_False, nullptr));
  PyObject* r = PyObject_Call(callable.get(), callArgs.get(), PyDict_Size(exKwargs.get()) ? exKwargs.get() : nullptr);
  if (r == nullptr) PyErr_Clear();
  PyObjectRef restored = PyObjectRef::steal(PyObject_CallFunctionObjArgs(api.setGradEnabled, prevGrad.get(), nullptr));
  PyErr_Clear();
  if (r == nullptr) return false;
  PyObjectRef res = PyObjectRef::steal(r);
  out.clear();
  try {
    flattenResult(res.get(), out);
  } catch (...) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// Values at which a symbol is probed: both ends of its range and points in between, all other
// than the hint.
std::vector<int64_t> probePoints(const sym::ShapeEnv& env, int id) {
  int64_t h = env.hint(id);
  sym::Range r = env.ranges()[id];
  std::vector<int64_t> cand = {r.lo, r.lo + 1, 5, 7, h + 5, 2 * h + 11, 1031, 4099};
  if (r.hi != sym::kInf) cand.push_back(r.hi);
  std::vector<int64_t> out;
  for (int64_t c : cand) {
    if (c != h && r.contains(c) && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

void flattenValues(const ValueRef& v, std::vector<ValueRef>& out) {
  if (v->isTensor()) {
    out.push_back(v);
  } else if (v->kind == ValueKind::kTuple || v->kind == ValueKind::kList) {
    for (const ValueRef& i : v->items) flattenValues(i, out);
  }
}

}  // namespace

void specializeSymbols(CompileContext& ctx, const std::vector<int>& ids, const std::string& why) {
  std::string where = ctx.here().str();
  for (int id : ids) {
    if (ctx.shapes.pinned(id)) continue;
    ctx.shapes.pin(id, where, why);
    const auto& sources = ctx.symbolSources.at(id);
    if (sources.size() > 1) {
      // Duck sizing gave several dimensions this symbol (a batch of 16 and a width of 16): the
      // trace may need only one of them pinned. This trace is dropped and traced again with
      // each dimension its own symbol (compiler.cpp); what that trace pins is kept static.
      for (const auto& [source, dim] : sources) ctx.duckSplit.emplace_back(source.name(), dim);
      continue;
    }
    for (const auto& [source, dim] : sources) {
      if (ctx.options.dynamic) ctx.options.dynamic->keepStatic(source.name(), dim, why);
    }
    ctx.dynamicNotes.push_back(ctx.shapes.sources(id)[0].name + " specialised to " + std::to_string(ctx.shapes.hint(id)) +
                               ": " + why + (where.empty() ? "" : " at " + where));
  }
}

namespace {

bool sameLeaf(const Leaf& a, const Leaf& b) {
  if (a.tensor != b.tensor) return false;
  if (a.tensor) return a.sizes.size() == b.sizes.size();
  int eq = PyObject_RichCompareBool(a.value.get(), b.value.get(), Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1 && Py_TYPE(a.value.get()) == Py_TYPE(b.value.get());
}

}  // namespace

namespace {

void collectSymFloats(const ValueRef& v, std::vector<ValueRef>& out) {
  if (!v) return;
  if (v->isSymFloat()) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    return;
  }
  if (v->isTensor()) return;
  for (const ValueRef& i : v->items) collectSymFloats(i, out);
}

// A call taking symbolic floats (x * lr, F.interpolate(x, scale_factor=s)): its results' sizes
// and Python values must not depend on them (the graph assumes the traced sizes). Probed on meta
// tensors with other values for the floats; where they differ, or a probe fails, the floats are
// specialised (guarded by value).
void checkFloatArgs(CompileContext& ctx, PyObject* fn, const std::string& method, const std::vector<ValueRef>& args,
                    const std::vector<std::pair<std::string, ValueRef>>& kwargs, const std::vector<ValueRef>& tensors,
                    const std::vector<ValueRef>& floats, const std::string& what) {
  std::string failure;
  if (tensors.empty()) {
    failure = what + "() takes a float that changes, and no tensor";
  } else {
    std::vector<Leaf> base, got;
    bool ok = probe(ctx, fn, method, args, kwargs, tensors, ctx.shapes.hints(), base);
    for (int k = 0; k < 2 && ok; ++k) {
      std::map<const Value*, double> alt;
      for (const ValueRef& f : floats) {
        double x = PyFloat_AS_DOUBLE(f->py());
        alt[f.get()] = k == 0 ? x / 2 + 0.125 : x * 3 + 1;
      }
      ctx.floatProbeValues = &alt;
      ok = probe(ctx, fn, method, args, kwargs, tensors, ctx.shapes.hints(), got);
      ctx.floatProbeValues = nullptr;
      ok = ok && got.size() == base.size();
      for (size_t j = 0; ok && j < base.size(); ++j) ok = sameLeaf(base[j], got[j]) && base[j].sizes == got[j].sizes;
    }
    if (!ok) failure = what + "() has results whose sizes or values depend on the float, or cannot run for other values";
  }
  if (failure.empty()) return;
  for (const ValueRef& f : floats) specializeSymFloat(ctx, f, failure);
}

// The change of every output size per unit of symbol `id` (others at their hints), checked at
// every probe point: "" and `coef` filled, or why the symbol cannot stay symbolic here.
std::string symbolCoefficients(CompileContext& ctx, PyObject* fn, const std::string& method, const std::vector<ValueRef>& args,
                               const std::vector<std::pair<std::string, ValueRef>>& kwargs,
                               const std::vector<ValueRef>& tensors, const std::vector<Leaf>& base, int id,
                               const std::string& what, std::vector<std::vector<int64_t>>& coef) {
  const sym::ShapeEnv& env = ctx.shapes;
  int64_t h = env.hint(id);
  coef.assign(base.size(), {});
  std::vector<Leaf> got;
  bool first = true;
  for (int64_t p : probePoints(env, id)) {
    std::vector<int64_t> values = env.hints();
    values[id] = p;
    if (!probe(ctx, fn, method, args, kwargs, tensors, values, got) || got.size() != base.size())
      return what + "() fails or changes its outputs for other sizes";
    for (size_t j = 0; j < base.size(); ++j) {
      if (!sameLeaf(base[j], got[j]))
        return base[j].tensor ? what + "() changes its outputs' ranks with the size"
                              : what + "() returns a Python value that depends on the size";
      if (!base[j].tensor) continue;
      if (first) coef[j].assign(base[j].sizes.size(), 0);
      for (size_t d = 0; d < base[j].sizes.size(); ++d) {
        int64_t delta = got[j].sizes[d] - base[j].sizes[d];
        if (first) {
          if (delta % (p - h) != 0) return what + "() has output sizes that are not linear in the input sizes";
          coef[j][d] = delta / (p - h);
        } else if (delta != coef[j][d] * (p - h)) {
          return what + "() has output sizes that are not linear in the input sizes";
        }
      }
    }
    first = false;
  }
  if (first) return what + "() cannot be probed at other sizes";
  return "";
}

// The argument whose sizes the call's one tensor result has (result_sizes.def), or null.
const ValueRef* sizesGivenBy(const std::string& method, const std::string& what, const std::vector<ValueRef>& args,
                             const std::vector<ValueRef>& outs) {
  static const std::unordered_set<std::string> kOfSelf = {
#define DYNAMO_RESULT_SIZES_OF_SELF(m) m,
#include "result_sizes.def"
  };
  static const std::unordered_map<std::string, size_t> kOfArg = {
#define DYNAMO_RESULT_SIZES_OF_ARG(f, k) {f, k},
#include "result_sizes.def"
  };
  if (outs.size() != 1 || !outs[0]->isTensor()) return nullptr;
  if (!method.empty()) {
    return kOfSelf.count(method) && !args.empty() && args[0]->isTensor() ? &args[0] : nullptr;
  }
  auto it = kOfArg.find(what);
  if (it == kOfArg.end() || args.size() <= it->second || !args[it->second]->isTensor()) return nullptr;
  const ValueRef& a = args[it->second];
  if (a->as<TensorData>().symSizes.empty() || sizesOf(outs[0]->obj.get()) != sizesOf(a->obj.get())) return nullptr;
  return &a;
}

// Sets the symbolic sizes of the result's tensor Values `outs` (in leaf order) from
// `sizeOf(j, d, e)`, which gives size d of tensor leaf j of `base` (false: no expression for
// it). A tensor whose sizes are all constants keeps none. False, with nothing set, when a size
// has no expression or the tensor leaves are not the outputs.
template <typename SizeOf>
bool setLeafSizes(const std::vector<Leaf>& base, const std::vector<ValueRef>& outs, SizeOf sizeOf) {
  std::vector<std::vector<sym::Expr>> exprs;
  for (size_t j = 0; j < base.size(); ++j) {
    if (!base[j].tensor) continue;
    std::vector<sym::Expr> sizes;
    bool symbolic = false;
    for (size_t d = 0; d < base[j].sizes.size(); ++d) {
      sym::Expr e;
      if (!sizeOf(j, d, e)) return false;
      symbolic = symbolic || !e.isConstant();
      sizes.push_back(std::move(e));
    }
    exprs.push_back(symbolic ? std::move(sizes) : std::vector<sym::Expr>{});
  }
  if (exprs.size() != outs.size()) return false;
  for (size_t i = 0; i < outs.size(); ++i) outs[i]->as<TensorData>().symSizes = std::move(exprs[i]);
  return true;
}

// Result sizes that are, at every probe point, one of the arguments' size expressions or symbolic
// ints (a reduction or a pointwise op on a tensor padded to a multiple of 8 keeps its
// floor-division size; a linear form cannot be fitted to it). Tried only when an argument has a
// size that is not linear; the probe points all lie inside the entry's guards (x[:, :t] of a
// 128-long table was guarded t <= 128). True when every result size was matched.
bool sizesByMatching(CompileContext& ctx, PyObject* fn, const std::string& method, const std::vector<ValueRef>& args,
                     const std::vector<std::pair<std::string, ValueRef>>& kwargs, const std::vector<ValueRef>& tensors,
                     const std::vector<ValueRef>& ints, const std::vector<int>& ids, const std::vector<Leaf>& base,
                     const std::vector<ValueRef>& outs) {
  std::vector<sym::Expr> candidates;
  bool anyNonAffine = false;
  auto add = [&](const sym::Expr& e) {
    if (e.isConstant() || std::find(candidates.begin(), candidates.end(), e) != candidates.end()) return;
    candidates.push_back(e);
    anyNonAffine = anyNonAffine || isNonAffine(e);
  };
  for (const ValueRef& t : tensors) {
    for (const sym::Expr& e : t->as<TensorData>().symSizes) add(e);
  }
  for (const ValueRef& i : ints) add(i->as<SymIntData>().expr);
  if (!anyNonAffine) return false;
  const sym::ShapeEnv& env = ctx.shapes;
  std::vector<std::vector<int64_t>> points;
  std::vector<std::vector<Leaf>> results;
  for (size_t k = 0; k < 8; ++k) {
    // The k-th probe point of every symbol, moved up a little until it satisfies the guards
    // (x.split(n // 2) guarded its two pieces: odd n are outside).
    std::vector<int64_t> values;
    bool inside = false;
    for (int64_t shift = 0; shift < 4 && !inside; ++shift) {
      values = env.hints();
      bool moved = false;
      for (int id : ids) {
        std::vector<int64_t> p = probePoints(env, id);
        if (k < p.size()) {
          values[id] = p[k] + shift;
          moved = true;
        }
      }
      inside = moved && values != env.hints() && env.check(values);
    }
    if (!inside) continue;
    std::vector<Leaf> got;
    if (!probe(ctx, fn, method, args, kwargs, tensors, values, got) || got.size() != base.size()) return false;
    for (size_t j = 0; j < base.size(); ++j) {
      if (!sameLeaf(base[j], got[j])) return false;
    }
    points.push_back(std::move(values));
    results.push_back(std::move(got));
  }
  if (points.size() < 3) return false;
  return setLeafSizes(base, outs, [&](size_t j, size_t d, sym::Expr& out) {
    bool constant = true;
    for (const auto& r : results) constant = constant && r[j].sizes[d] == base[j].sizes[d];
    if (constant) {
      out = sym::Expr(base[j].sizes[d]);
      return true;
    }
    auto fits = [&](const sym::Expr& c) {
      try {
        if (env.evalHint(c) != base[j].sizes[d]) return false;
        for (size_t p = 0; p < points.size(); ++p) {
          if (c.eval(points[p]) != results[p][j].sizes[d]) return false;
        }
        return true;
      } catch (const sym::SymbolicError&) {
        return false;
      }
    };
    auto c = std::find_if(candidates.begin(), candidates.end(), fits);
    if (c == candidates.end()) return false;
    out = *c;
    return true;
  });
}

}  // namespace

void inferResultSizes(CompileContext& ctx, PyObject* fn, const std::string& method, const std::vector<ValueRef>& args,
                      const std::vector<std::pair<std::string, ValueRef>>& kwargs, const ValueRef& result) {
  std::vector<ValueRef> tensors;
  for (const ValueRef& a : args) collectTensors(a, tensors);
  for (const auto& kv : kwargs) collectTensors(kv.second, tensors);
  std::vector<ValueRef> floats;
  for (const ValueRef& a : args) collectSymFloats(a, floats);
  for (const auto& kv : kwargs) collectSymFloats(kv.second, floats);
  if (!floats.empty())
    checkFloatArgs(ctx, fn, method, args, kwargs, tensors, floats, method.empty() ? callableName(fn) : "Tensor." + method);
  std::vector<ValueRef> ints;
  for (const ValueRef& a : args) collectSymInts(a, ints);
  for (const auto& kv : kwargs) collectSymInts(kv.second, ints);
  std::vector<int> ids = freeSymbols(ctx, tensors, ints);
  if (ids.empty()) return;
  std::string what = method.empty() ? callableName(fn) : "Tensor." + method;
  std::vector<ValueRef> outs;
  if (result) flattenValues(result, outs);
  // Calls with a size rule (size_rules.def): computed, not probed.
  if (sizesByRule(ctx, what, args, kwargs, outs)) return;
  if (tensors.empty()) {
    // A factory (torch.zeros(n)) runs for real while tracing: probing it at other values would
    // allocate (and move the random-number generator); its int arguments are specialised.
    specializeSymbols(ctx, ids, what + "() takes an int that changes, and no tensor");
    return;
  }
  // Calls whose result has an argument's sizes (result_sizes.def): given, not probed.
  if (const ValueRef* same = sizesGivenBy(method, what, args, outs)) {
    if (outs[0] != *same) outs[0]->as<TensorData>().symSizes = (*same)->as<TensorData>().symSizes;
    return;
  }
  const sym::ShapeEnv& env = ctx.shapes;
  std::vector<Leaf> base;
  if (!probe(ctx, fn, method, args, kwargs, tensors, env.hints(), base)) {
    specializeSymbols(ctx, ids, what + "() cannot run on meta tensors of other sizes");
    return;
  }
  if (sizesByMatching(ctx, fn, method, args, kwargs, tensors, ints, ids, base, outs)) return;
  // Per symbol: the change of every output size per unit of the symbol, from the first probe,
  // checked at every other probe. A symbol whose probes fail (layer_norm's normalized dimension,
  // a matmul's inner dimension) is specialised alone: the others keep their symbols.
  std::vector<std::vector<std::vector<int64_t>>> coef;  // [symbol][leaf][dim]
  std::vector<int> kept;
  std::vector<std::pair<int, std::string>> nonLinear;  // tried again by matching, after the others
  std::vector<Leaf> got;
  for (int id : ids) {
    std::string why = symbolCoefficients(ctx, fn, method, args, kwargs, tensors, base, id, what, coef.emplace_back());
    if (why.empty()) {
      kept.push_back(id);
    } else {
      coef.pop_back();
      if (why.find("not linear") != std::string::npos)
        nonLinear.emplace_back(id, why);
      else
        specializeSymbols(ctx, {id}, why);  // (linear(x) of a static weight pins x's last size)
    }
  }
  if (!nonLinear.empty()) {
    // The symbols that failed for good are pinned now: a match over the rest may hold (a mean
    // over a length padded to a multiple of 8, then linear).
    std::vector<int> rest = kept;
    for (const auto& [id, why] : nonLinear) rest.push_back(id);
    if (sizesByMatching(ctx, fn, method, args, kwargs, tensors, ints, rest, base, outs)) return;
    for (const auto& [id, why] : nonLinear) specializeSymbols(ctx, {id}, why);
  }
  ids = kept;
  if (ids.empty()) return;  // every symbol pinned: the example's sizes are exact
  std::string failure;
  // All symbols moved together: the sizes must add up (no products of symbols).
  if (failure.empty() && ids.size() > 1) {
    std::vector<int64_t> values = env.hints();
    for (size_t k = 0; k < ids.size(); ++k) values[ids[k]] = env.hint(ids[k]) + 3 + 2 * static_cast<int64_t>(k);
    if (!probe(ctx, fn, method, args, kwargs, tensors, values, got) || got.size() != base.size()) {
      failure = what + "() fails for other sizes";
    } else {
      for (size_t j = 0; j < base.size() && failure.empty(); ++j) {
        if (!base[j].tensor) continue;
        for (size_t d = 0; d < base[j].sizes.size(); ++d) {
          int64_t want = base[j].sizes[d];
          for (size_t k = 0; k < ids.size(); ++k) want += coef[k][j][d] * (values[ids[k]] - env.hint(ids[k]));
          if (got[j].sizes[d] != want) failure = what + "() has output sizes that are not linear in the input sizes";
        }
      }
    }
  }
  if (failure.empty()) {
    // Map leaves to the result's tensor Values (same order).
    bool set = setLeafSizes(base, outs, [&](size_t j, size_t d, sym::Expr& e) {
      e = sym::Expr(base[j].sizes[d]);
      for (size_t k = 0; k < ids.size(); ++k) {
        if (int64_t c = coef[k][j][d]) e = e + sym::Expr(c) * (sym::Expr::symbol(ids[k]) - sym::Expr(env.hint(ids[k])));
      }
      return true;
    });
    if (set) return;
    failure = what + "() has results the trace cannot match to its outputs";
  }
  specializeSymbols(ctx, ids, failure);
}

void specializeSizes(CompileContext& ctx, const ValueRef& tensor, const std::string& why) {
  if (!tensor || tensor->as<TensorData>().symSizes.empty()) return;
  std::vector<int> ids = freeSymbols(ctx, {tensor});
  specializeSymbols(ctx, ids, why);
}

void checkInPlaceSizes(CompileContext& ctx, const ValueRef& tensor, const std::string& what) {
  if (!tensor || tensor->as<TensorData>().symSizes.empty()) return;
  std::vector<int64_t> now = sizesOf(tensor->obj.get());
  bool same = now.size() == tensor->as<TensorData>().symSizes.size();
  for (size_t d = 0; same && d < now.size(); ++d) same = ctx.shapes.evalHint(tensor->as<TensorData>().symSizes[d]) == now[d];
  if (same) return;
  specializeSymbols(ctx, freeSymbols(ctx, {tensor}), what + "() changes the sizes of its input in place");
  tensor->as<TensorData>().symSizes.clear();  // every symbol it had is pinned: the example's sizes are exact
}

std::unique_ptr<ShapeGuards> makeShapeGuards(const CompileContext& ctx) {
  if (ctx.shapes.numSymbols() == 0) return nullptr;
  std::vector<std::vector<ShapeGuards::DimSource>> sources;
  for (const auto& list : ctx.symbolSources) {
    sources.emplace_back();
    for (const auto& [s, d] : list) sources.back().push_back(ShapeGuards::DimSource{s, d});
  }
  return std::make_unique<ShapeGuards>(ctx.shapes, std::move(sources));
}

namespace {

// `e` with every pinned symbol replaced by its value.
sym::Expr withPinned(const sym::ShapeEnv& env, const sym::Expr& e) {
  const sym::Expr::Rep& rep = e.rep();
  sym::Expr out(rep.constant);
  for (const sym::Term& t : rep.terms) {
    sym::Expr term(t.coef);
    for (const sym::AtomPtr& a : t.factors) {
      sym::Expr f;
      switch (a->kind) {
        case sym::Atom::Kind::kSymbol:
          f = env.pinned(a->symbol) ? sym::Expr(env.hint(a->symbol)) : sym::Expr::symbol(a->symbol);
          break;
        case sym::Atom::Kind::kFloorDiv: f = sym::floorDiv(withPinned(env, a->args[0]), withPinned(env, a->args[1]), &env); break;
        case sym::Atom::Kind::kMod: f = sym::mod(withPinned(env, a->args[0]), withPinned(env, a->args[1]), &env); break;
        case sym::Atom::Kind::kMin: f = sym::min(withPinned(env, a->args[0]), withPinned(env, a->args[1]), &env); break;
        case sym::Atom::Kind::kMax: f = sym::max(withPinned(env, a->args[0]), withPinned(env, a->args[1]), &env); break;
      }
      term = term * f;
    }
    out = out + term;
  }
  return out;
}

}  // namespace

Graph withSymShapes(const CompileContext& ctx, const Graph& graph) {
  bool dynamic = false;
  for (int id = 0; id < ctx.shapes.numSymbols() && !dynamic; ++id) dynamic = !ctx.shapes.pinned(id);
  if (!dynamic) return graph;
  std::unordered_map<const Node*, std::vector<std::string>> shapes;
  for (const ValueRef& v : ctx.nodeTensors) {
    const TensorData& t = v->as<TensorData>();
    if (t.symSizes.empty() || !t.node) continue;
    std::vector<std::string> texts;
    bool symbolic = false;
    for (const sym::Expr& e : t.symSizes) {
      sym::Expr s = withPinned(ctx.shapes, e);
      texts.push_back(s.isConstant() ? std::string() : s.str());
      symbolic = symbolic || !s.isConstant();
    }
    if (symbolic) shapes[t.node.get()] = std::move(texts);
  }
  if (shapes.empty()) return graph;
  GraphRewriter rewriter(graph, [&](const Node& n) {
    NodeMeta meta = n.meta();
    auto it = shapes.find(&n);
    if (it != shapes.end() && meta.tensor && meta.tensor->shape.size() == it->second.size())
      meta.tensor->symShape = it->second;
    return meta;
  });
  for (const NodeRef& n : graph.body()) rewriter.copy(n);
  return rewriter.finish();
}

}  // namespace dynamo::core::interp
