// The "fused" backend on a graph with dynamic sizes (BackendRequest::dynamic).
//
//   first call with an input signature (sizes, strides, int and float values):
//     graphAtSizes: run every node on meta tensors of the new sizes -> the graph with their
//                   tensor meta (no data touched, no side effect)
//     compileFused: lower it again (cheap), emit each kernel as a template whose size integers
//                   that differ from the scope's earlier lowerings are a parameter array
//                   (codegen/kernel_template.h): same kernel text -> same source -> cache hit
//   later calls with it: that signature's FusedFn
//
// The function is compiled once (one cache entry); per size only the lowering runs, and the C++
// compiler only for kernels whose text is new. Before the first size is compiled, the graph is
// also lowered (not compiled) once at probe sizes, every dynamic dimension (a plain symbol in the
// placeholders' TensorMeta::symShape) one larger: the integers that move with the sizes are then
// parameters already in the first size's kernels, so the second size (mark_dynamic,
// dynamic=True) reuses them instead of compiling its own. A graph that cannot run on meta tensors (an op
// without a meta kernel, a value read from data) runs that signature on the eager runner,
// exact, and says why (DYNAMO_LOGS=fusion). Each lowering goes to the compile sink (the trace
// store) with its sizes, why it ran and, for one made at a call, its kernels
// (docs/dynamic-shapes.md, "The fused backend's lowerings in the trace store").
#include <Python.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "backends_internal.h"
#include "dynamo/backends/fused.h"
#include "dynamo/codegen/emit.h"
#include "dynamo/codegen/kernel_template.h"
#include "dynamo/codegen/lowering.h"
#include "dynamo/core/compile_sink.h"
#include "dynamo/core/graph.h"
#include "dynamo/core/graph_python.h"
#include "dynamo/core/graph_runner.h"

namespace dynamo::backends {
namespace {

using core::PyObjectRef;

PyObject* torchModule() {
  static PyObject* torch = PyImport_ImportModule("torch");  // new ref, kept for the process
  if (!torch) throw core::PythonError{};
  return torch;
}

bool isTensor(PyObject* v) {
  PyObject* type = PyObject_GetAttrString(torchModule(), "Tensor");  // new ref
  if (!type) throw core::PythonError{};
  int r = PyObject_IsInstance(v, type);
  Py_DECREF(type);
  if (r < 0) throw core::PythonError{};
  return r == 1;
}

// A meta tensor with t's sizes, strides and dtype (new ref).
PyObjectRef metaLike(PyObject* t) {
  PyObjectRef shape = PyObjectRef::steal(core::checkPy(PyObject_GetAttrString(t, "shape")));
  PyObjectRef stride = PyObjectRef::steal(core::checkPy(PyObject_CallMethod(t, "stride", nullptr)));
  PyObjectRef dtype = PyObjectRef::steal(core::checkPy(PyObject_GetAttrString(t, "dtype")));
  PyObjectRef fn = PyObjectRef::steal(core::checkPy(PyObject_GetAttrString(torchModule(), "empty_strided")));
  PyObjectRef args = PyObjectRef::steal(core::checkPy(PyTuple_Pack(2, shape.get(), stride.get())));
  PyObjectRef kwargs = PyObjectRef::steal(core::checkPy(PyDict_New()));
  PyObjectRef meta = PyObjectRef::steal(core::checkPy(PyUnicode_FromString("meta")));
  if (PyDict_SetItemString(kwargs.get(), "dtype", dtype.get()) < 0 ||
      PyDict_SetItemString(kwargs.get(), "device", meta.get()) < 0) {
    throw core::PythonError{};
  }
  return PyObjectRef::steal(core::checkPy(PyObject_Call(fn.get(), args.get(), kwargs.get())));
}

// The pending Python exception's first line, cleared.
std::string takePythonError() {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);  // new refs (or null)
  std::string why = "Python error";
  if (ev) {
    PyObject* s = PyObject_Str(ev);  // new ref
    const char* text = s ? PyUnicode_AsUTF8(s) : nullptr;
    if (text) why = text;
    Py_XDECREF(s);
  }
  PyErr_Clear();
  Py_XDECREF(et);
  Py_XDECREF(ev);
  Py_XDECREF(tb);
  return why.substr(0, why.find('\n'));
}

// Node n run on the meta values of its inputs (new ref).
PyObjectRef runOnMeta(const core::NodeRef& n, const core::NodeValueFn& value) {
  std::vector<PyObjectRef> args;
  for (const core::Arg& a : n->args()) args.push_back(core::argToPython(a, value));
  PyObjectRef kwargs = PyObjectRef::steal(core::checkPy(PyDict_New()));
  for (const auto& [k, a] : n->kwargs()) {
    PyObjectRef v = core::argToPython(a, value);
    if (PyDict_SetItemString(kwargs.get(), k.c_str(), v.get()) < 0) throw core::PythonError{};
  }
  PyObjectRef callable;
  size_t first = 0;
  if (n->op() == core::NodeOp::kCallMethod) {
    callable = PyObjectRef::steal(core::checkPy(PyObject_GetAttrString(args.at(0).get(), n->method().c_str())));
    first = 1;
  } else {
    if (!n->target().hasCallable()) throw Error("its target has no callable");
    callable = PyObjectRef::borrow(n->target().callable());
  }
  PyObjectRef tuple = PyObjectRef::steal(core::checkPy(PyTuple_New(static_cast<Py_ssize_t>(args.size() - first))));
  for (size_t i = first; i < args.size(); ++i) {
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i - first), args[i].release());  // steals
  }
  return PyObjectRef::steal(
      core::checkPy(PyObject_Call(callable.get(), tuple.get(), PyDict_GET_SIZE(kwargs.get()) ? kwargs.get() : nullptr)));
}

core::Arg remap(const core::Arg& a, const std::unordered_map<const core::Node*, core::NodeRef>& copies) {
  if (!a.containsNode()) return a;
  if (a.isNode()) return core::Arg::node(copies.at(a.asNode().get()));
  std::vector<core::Arg> items;
  for (const core::Arg& item : a.items()) items.push_back(remap(item, copies));
  switch (a.kind()) {
    case core::ArgKind::kTuple: return core::Arg::tuple(std::move(items));
    case core::ArgKind::kList: return core::Arg::list(std::move(items));
    case core::ArgKind::kSlice: return core::Arg::slice(items[0], items[1], items[2]);
    case core::ArgKind::kDict: {
      std::vector<std::pair<std::string, core::Arg>> entries;
      for (size_t i = 0; i < items.size(); ++i) entries.emplace_back(a.keys()[i], std::move(items[i]));
      return core::Arg::dict(std::move(entries));
    }
    default: DYNAMO_INTERNAL_ASSERT(false, "fused per size: unexpected container kind");
  }
  return a;
}

// The meta of a node at the new sizes: the meta run's sizes, strides and dtype; the device and
// requires_grad of the captured graph (the meta run's device is "meta").
core::NodeMeta metaAt(const core::NodeMeta& old, PyObject* value) {
  core::NodeMeta m = old;
  if (!old.tensor) return m;
  if (!isTensor(value)) throw Error("its result is no longer a tensor");
  core::TensorMeta t = core::tensorMetaOf(value);
  t.device = old.tensor->device;
  t.requiresGrad = old.tensor->requiresGrad;
  if (t.dtype != old.tensor->dtype) throw Error("its dtype changed with the sizes");
  m.tensor = std::move(t);
  return m;
}

// Saves the random number generators' states and restores them when it goes out of scope: a
// factory node without tensor inputs (`torch.randn(x.shape[0])`) runs on its real device in the
// meta run and would draw numbers the compiled call then no longer gets (eager's stream shifted
// by the probe size). CPU always; CUDA when it is initialised.
class RngStateGuard {
 public:
  RngStateGuard() {
    random_ = PyObjectRef::steal(core::checkPy(PyImport_ImportModule("torch.random")));
    cpu_ = PyObjectRef::steal(core::checkPy(PyObject_CallMethod(random_.get(), "get_rng_state", nullptr)));
    cuda_ = PyObjectRef::steal(core::checkPy(PyObject_GetAttrString(torchModule(), "cuda")));
    PyObjectRef init = PyObjectRef::steal(core::checkPy(PyObject_CallMethod(cuda_.get(), "is_initialized", nullptr)));
    if (PyObject_IsTrue(init.get()) == 1) {
      cudaStates_ = PyObjectRef::steal(core::checkPy(PyObject_CallMethod(cuda_.get(), "get_rng_state_all", nullptr)));
    }
  }
  ~RngStateGuard() {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  // a pending error (the meta run failed) survives the restore
    PyObject* r = PyObject_CallMethod(random_.get(), "set_rng_state", "O", cpu_.get());  // new ref
    Py_XDECREF(r);
    if (r && cudaStates_) {
      r = PyObject_CallMethod(cuda_.get(), "set_rng_state_all", "O", cudaStates_.get());  // new ref
      Py_XDECREF(r);
    }
    if (!r) PyErr_WriteUnraisable(nullptr);  // cannot throw from a destructor
    PyErr_Restore(et, ev, tb);
  }
  RngStateGuard(const RngStateGuard&) = delete;
  RngStateGuard& operator=(const RngStateGuard&) = delete;

 private:
  PyObjectRef random_, cpu_, cuda_, cudaStates_;
};

// The graph with every node's tensor meta at the sizes of `inputs`, found by running its nodes
// on meta tensors. Throws Error (with the node) when a node cannot run so.
core::Graph graphAtSizes(const core::Graph& g, PyObject* const* inputs, size_t count) {
  DYNAMO_INTERNAL_ASSERT(count == g.inputs().size(), "fused per size: ", count, " inputs for a graph of ",
                         g.inputs().size());
  RngStateGuard rng;
  std::unordered_map<const core::Node*, PyObjectRef> values;
  std::unordered_map<const core::Node*, core::NodeRef> copies;
  core::GraphBuilder b;
  for (size_t i = 0; i < count; ++i) {
    const core::NodeRef& in = g.inputs()[i];
    core::NodeMeta m = in->meta();
    try {
      if (isTensor(inputs[i])) {
        values[in.get()] = metaLike(inputs[i]);
        if (m.tensor) {  // the input's sizes and strides; the captured device (a probe's is "meta")
          core::TensorMeta t = core::tensorMetaOf(inputs[i]);
          t.device = m.tensor->device;
          t.requiresGrad = m.tensor->requiresGrad;
          m.tensor = std::move(t);
        }
      } else {
        values[in.get()] = PyObjectRef::borrow(inputs[i]);
      }
    } catch (const core::PythonError&) {
      throw Error("input '" + in->name() + "' has no meta tensor: " + takePythonError());
    }
    copies[in.get()] = b.placeholder(in->source(), std::move(m), in->name());
  }
  core::NodeValueFn value = [&](const core::NodeRef& n) { return values.at(n.get()).get(); };
  for (const core::NodeRef& n : g.body()) {
    PyObjectRef v;
    core::NodeMeta m;
    try {
      v = runOnMeta(n, value);
      m = metaAt(n->meta(), v.get());
    } catch (const core::PythonError&) {
      throw Error("node '" + n->name() + "' did not run on meta tensors: " + takePythonError());
    } catch (const Error& e) {
      throw Error("node '" + n->name() + "': " + e.what());
    }
    values[n.get()] = std::move(v);
    std::vector<core::Arg> args;
    for (const core::Arg& a : n->args()) args.push_back(remap(a, copies));
    core::Kwargs kwargs;
    for (const auto& [k, a] : n->kwargs()) kwargs.emplace_back(k, remap(a, copies));
    copies[n.get()] = n->op() == core::NodeOp::kCallMethod
                          ? b.callMethod(n->method(), std::move(args), std::move(kwargs), std::move(m), n->name())
                          : b.callFunction(n->target(), std::move(args), std::move(kwargs), std::move(m), n->name());
  }
  b.output(remap(g.output()->outputValue(), copies), g.output()->meta());
  return b.build();
}

// A Python int or float example: a number kernels may read at call time (compileFused).
codegen::ScalarInput numberKind(PyObject* v) {
  return PyLong_CheckExact(v) ? codegen::ScalarInput::kInt
         : PyFloat_CheckExact(v) ? codegen::ScalarInput::kFloat
                                 : codegen::ScalarInput::kNone;
}

// Two other values of a number for the meta probe of numberSignature (new refs).
std::vector<PyObjectRef> otherValues(PyObject* v) {
  std::vector<PyObjectRef> out;
  if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0 || PyErr_Occurred()) {
      PyErr_Clear();
      return out;
    }
    const long long big = 1LL << 40;
    for (long long y : {x > -big && x < big ? x + 1 : x / 2, x > -big && x < big ? 2 * x + 3 : x / 3})
      out.push_back(PyObjectRef::steal(core::checkPy(PyLong_FromLongLong(y))));
  } else {
    double x = PyFloat_AS_DOUBLE(v);
    for (double y : {x * 0.5 + 0.375, -(x + 1.25)})
      out.push_back(PyObjectRef::steal(core::checkPy(PyFloat_FromDouble(y))));
  }
  return out;
}

// The first node whose result (a tensor's sizes, strides, dtype; or being a tensor) differs
// between two meta runs of the same graph, or empty.
std::string firstMetaDifference(const core::Graph& a, const core::Graph& b) {
  for (size_t i = 0; i < a.body().size() && i < b.body().size(); ++i) {
    const auto& x = a.body()[i]->meta().tensor;
    const auto& y = b.body()[i]->meta().tensor;
    if (x.has_value() != y.has_value() ||
        (x && (x->shape != y->shape || x->strides != y->strides || x->dtype != y->dtype)))
      return a.body()[i]->name();
  }
  return {};
}

// Per input: 'i' or 'f' for a Python int or float whose value the per-size lowering does not
// depend on (kernels read it at call time, extern calls take it as it is), '-' otherwise. A number
// is value-free when the graph run on meta tensors with two other values of it gives every node
// the same sizes, strides and dtype (the trace already specialises a number that sets a size;
// this checks it). One that changes a result, or makes the meta run fail, stays in the signature:
// each new value is lowered again (correct, slower), and DYNAMO_LOGS=fusion says why.
std::string numberSignature(const core::Graph& g, const std::vector<PyObject*>& examples, const std::string& function) {
  std::string out(examples.size(), '-');
  std::optional<core::Graph> base;
  for (size_t i = 0; i < examples.size(); ++i) {
    codegen::ScalarInput kind = numberKind(examples[i]);
    if (kind == codegen::ScalarInput::kNone) continue;
    const std::string name = g.inputs().at(i)->source().empty() ? g.inputs()[i]->name() : g.inputs()[i]->source();
    std::string why;
    try {
      if (!base) base = graphAtSizes(g, examples.data(), examples.size());
      std::vector<PyObjectRef> others = otherValues(examples[i]);
      if (others.empty()) why = "its value does not fit in 64 bits";
      for (const PyObjectRef& other : others) {
        if (!why.empty()) break;
        std::vector<PyObject*> probe = examples;
        probe[i] = other.get();
        std::string node = firstMetaDifference(*base, graphAtSizes(g, probe.data(), probe.size()));
        if (!node.empty()) why = "node '" + node + "' has other sizes, strides or dtype for another value";
      }
    } catch (const Error& e) {
      why = e.what();
    } catch (const core::PythonError&) {
      why = takePythonError();
    }
    if (why.empty()) {
      out[i] = kind == codegen::ScalarInput::kInt ? 'i' : 'f';
    } else if (logEnabled("fusion")) {
      std::fprintf(stderr, "[dynamo fusion] %s: %s input '%s' is lowered per value: %s\n", function.c_str(),
                   kind == codegen::ScalarInput::kInt ? "int" : "float", name.c_str(), why.c_str());
    }
  }
  return out;
}

// Meta tensors (new refs) standing for `examples` at probe sizes: each dynamic dimension's
// symbol one larger than its example (one value per symbol: duck-sized dimensions stay equal),
// contiguous; inputs without a dynamic dimension as they are. Empty when the graph has no
// dynamic dimension, or one the probe cannot vary alone (an expression, a strided input).
std::vector<PyObjectRef> probeInputs(const core::Graph& g, const std::vector<PyObject*>& examples) {
  std::map<std::string, int64_t> probe;  // symbol -> its probe size
  std::vector<PyObjectRef> out;
  for (size_t i = 0; i < examples.size() && i < g.inputs().size(); ++i) {
    const auto& t = g.inputs()[i]->meta().tensor;
    if (!t || t->symShape.empty()) {
      out.push_back(PyObjectRef::borrow(examples[i]));
      continue;
    }
    if (t->symShape.size() != t->shape.size()) return {};
    PyObjectRef contiguous =
        PyObjectRef::steal(core::checkPy(PyObject_CallMethod(examples[i], "is_contiguous", nullptr)));
    if (contiguous.get() != Py_True) return {};
    PyObjectRef shape = PyObjectRef::steal(core::checkPy(PyTuple_New(static_cast<Py_ssize_t>(t->shape.size()))));
    for (size_t d = 0; d < t->shape.size(); ++d) {
      const std::string& e = t->symShape[d];
      if (!e.empty() && !plainSymbol(e)) return {};
      int64_t size = e.empty() ? t->shape[d] : probe.try_emplace(e, t->shape[d] + 1).first->second;
      PyTuple_SET_ITEM(shape.get(), static_cast<Py_ssize_t>(d), core::checkPy(PyLong_FromLongLong(size)));  // steals
    }
    PyObjectRef dtype = PyObjectRef::steal(core::checkPy(PyObject_GetAttrString(examples[i], "dtype")));
    PyObjectRef fn = PyObjectRef::steal(core::checkPy(PyObject_GetAttrString(torchModule(), "empty")));
    PyObjectRef args = PyObjectRef::steal(core::checkPy(PyTuple_Pack(1, shape.get())));
    PyObjectRef kwargs = PyObjectRef::steal(core::checkPy(PyDict_New()));
    PyObjectRef meta = PyObjectRef::steal(core::checkPy(PyUnicode_FromString("meta")));
    if (PyDict_SetItemString(kwargs.get(), "dtype", dtype.get()) < 0 ||
        PyDict_SetItemString(kwargs.get(), "device", meta.get()) < 0) {
      throw core::PythonError{};
    }
    out.push_back(PyObjectRef::steal(core::checkPy(PyObject_Call(fn.get(), args.get(), kwargs.get()))));
  }
  if (probe.empty()) return {};
  return out;
}

// Lowers g at probe sizes (no C++ compile) and registers its kernels' templates in `scope`'s
// families as a parametrised lowering: the integers that differ from the first size's are marked
// dynamic before that size's kernels are printed. Returns how many kernels it registered (0: no
// probe: no dynamic dimension it can vary, or the graph does not run on meta tensors at the
// probe sizes; the first size's kernels then have literal sizes, as before).
size_t probeFamilies(const core::Graph& g, const std::vector<PyObject*>& examples, const std::string& scope,
                     const std::string& function) {
  std::vector<PyObjectRef> probe = probeInputs(g, examples);
  if (probe.empty()) return 0;
  std::vector<PyObject*> raw;
  for (const PyObjectRef& p : probe) raw.push_back(p.get());
  std::optional<core::Graph> sized;
  try {
    sized = graphAtSizes(g, raw.data(), raw.size());
  } catch (const Error& e) {
    if (logEnabled("fusion"))
      std::fprintf(stderr, "[dynamo fusion] %s: no probe lowering (the first size's kernels keep literal sizes): %s\n",
                   function.c_str(), e.what());
    return 0;
  }
  codegen::LoweringOptions options;  // the options compileFused uses outside autograd
  for (PyObject* e : examples) options.scalarInputs.push_back(numberKind(e));
  codegen::Program program = codegen::lowerGraph(*sized, options);
  for (const codegen::Kernel& k : program.kernels)
    codegen::sizeKernel(codegen::splitMarked(codegen::emitCppMarked(k, program)), scope, true);
  return program.kernels.size();
}

class PerSizeFusedFn final : public core::CompiledGraphFn {
 public:
  explicit PerSizeFusedFn(const core::BackendRequest& r)
      : graph_(r.graph), function_(r.function), where_(r.where), suppress_(r.suppressErrors) {
    options_.sizeParams = true;
    options_.sizeScope = r.function + "@" + r.where.file + ":" + std::to_string(r.where.line);
  }

  /// Compiles for the example inputs now (the captured graph has their meta).
  void prime(const std::vector<PyObject*>& examples) const {
    if (!PyErr_Occurred() && !std::getenv("DYNAMO_FUSED_NUMBERS_PER_VALUE"))  // (the old way: to compare)
      numbers_ = numberSignature(graph_, examples, function_);
    std::string key = signature(examples.data(), examples.size());
    if (!PyErr_Occurred()) {
      try {
        probeFamilies(graph_, examples, options_.sizeScope, function_);
      } catch (const core::PythonError&) {
        PyErr_Clear();  // the probe is an optimisation: without it the first size has literal sizes
      }
    }
    std::vector<PyObjectRef> ex;
    for (PyObject* e : examples) ex.push_back(PyObjectRef::borrow(e));
    core::BackendRequest r{graph_, ex, function_, where_, suppress_};
    auto start = std::chrono::steady_clock::now();
    std::shared_ptr<core::CompiledGraphFn> fn = compileFused(r, nullptr, options_);
    Lowering first;  // its kernels are the compile's own (CompileRecord::kernels)
    first.reason = "first input signature";
    record(examples.data(), examples.size(), msSince(start), std::move(first));
    seen_.insert(key);
    bySignature_[key] = {fn, ++clock_};
  }

  void entryMade(uint64_t entryId) const override { entryId_ = entryId; }

  PyObject* call(PyObject* const* inputs, size_t count, size_t* failedAt) const override {
    // Held for the call: the kernels run with the GIL released, and another thread may evict it.
    std::shared_ptr<core::CompiledGraphFn> fn = last_;
    // The last size again (a training loop, a server at one batch size): no signature to build.
    if (fn == nullptr || !fusedTakesSizes(*fn, inputs, count, numbers_)) {
      try {
        fn = forInputs(inputs, count);
        last_ = fn;
      } catch (const std::exception& e) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_RuntimeError,
                          (std::string("dynamo: compiling the graph for new input sizes failed: ") + e.what()).c_str());
        return nullptr;
      }
    }
    return fn->call(inputs, count, failedAt);
  }

 private:
  // Signatures kept per entry: each keeps its program and an arena for its intermediates, so a
  // workload of many sizes drops the least recently used ones (lowered again if they come back).
  static constexpr size_t kMaxSizes = 16;

  struct Compiled {
    std::shared_ptr<core::CompiledGraphFn> fn;
    uint64_t lastUse = 0;
  };

  // What the trace store records of one lowering beside its signature and time.
  struct Lowering {
    std::string reason;                        // why it ran
    double metaMs = 0;                         // running the graph on meta tensors
    std::vector<core::BackendKernel> kernels;  // made at a call (the first's are the compile's)
    std::string fallback;                      // why it runs on the eager runner, or ""
  };

  static double msSince(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  }

  // The call's input signature: sizes and strides, the values of numbers the lowering depends on,
  // the type only of the value-free ones (numbers_).
  std::string signature(PyObject* const* inputs, size_t count) const {
    static PyObject* const anyInt = PyLong_FromLong(0);      // immortal for the process
    static PyObject* const anyFloat = PyFloat_FromDouble(0);  // immortal for the process
    std::vector<PyObject*> keyed(inputs, inputs + count);
    for (size_t i = 0; i < count && i < numbers_.size(); ++i) {
      if (numbers_[i] == 'i' && PyLong_CheckExact(inputs[i])) keyed[i] = anyInt;
      if (numbers_[i] == 'f' && PyFloat_CheckExact(inputs[i])) keyed[i] = anyFloat;
    }
    return inputSignature(keyed.data(), count);
  }

  std::shared_ptr<core::CompiledGraphFn> forInputs(PyObject* const* inputs, size_t count) const {
    std::string key = signature(inputs, count);
    auto it = bySignature_.find(key);
    if (it != bySignature_.end()) {
      it->second.lastUse = ++clock_;
      return it->second.fn;
    }
    auto start = std::chrono::steady_clock::now();
    std::shared_ptr<core::CompiledGraphFn> fn;
    Lowering lowering;
    lowering.reason = seen_.insert(key).second ? "new input signature"
                                               : "input signature again (evicted: " + std::to_string(kMaxSizes) +
                                                     " kept per entry)";
    try {
      core::Graph sized = graphAtSizes(graph_, inputs, count);
      lowering.metaMs = msSince(start);
      std::vector<PyObjectRef> ex;
      for (size_t i = 0; i < count; ++i) ex.push_back(PyObjectRef::borrow(inputs[i]));
      core::BackendRequest r{sized, ex, function_, where_, suppress_};
      // The trace store records this lowering's kernels with the compile that made the entry.
      std::optional<core::BackendKernelCollector> collect;
      if (core::compileSink()) collect.emplace(&lowering.kernels);
      fn = compileFused(r, nullptr, options_);
    } catch (const Error& e) {
      if (logEnabled("fusion"))
        std::fprintf(stderr, "[dynamo fusion] %s: new sizes run on the eager runner: %s\n", function_.c_str(), e.what());
      fn = std::make_shared<GraphRunnerFn>(graph_);
      lowering.fallback = e.what();
    }
    record(inputs, count, msSince(start), std::move(lowering));
    if (bySignature_.size() >= kMaxSizes) {
      auto oldest = bySignature_.begin();
      for (auto i = bySignature_.begin(); i != bySignature_.end(); ++i)
        if (i->second.lastUse < oldest->second.lastUse) oldest = i;
      bySignature_.erase(oldest);
    }
    bySignature_[key] = {fn, ++clock_};
    return fn;
  }

  // Hands one lowering to the trace store's sink (as the AOT backends' per-size compiles).
  void record(PyObject* const* inputs, size_t count, double ms, Lowering lowering) const {
    const auto& sink = core::compileSink();
    if (!sink) return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    core::BackendCompileRecord rec;
    rec.entryId = entryId_;
    rec.backend = "fused";
    rec.ms = ms;
    rec.lowerMs = lowering.metaMs + (lowering.kernels.empty() ? 0.0 : lowering.kernels.front().lowerMs);
    rec.kernels = std::move(lowering.kernels);
    rec.reason = std::move(lowering.reason);
    rec.fallback = std::move(lowering.fallback);
    const std::vector<core::NodeRef>& names = graph_.inputs();
    std::map<std::string, int64_t> symbols;  // a dynamic dimension's symbol -> its size here
    for (size_t i = 0; i < count && i < names.size(); ++i) {
      const auto& t = names[i]->meta().tensor;
      if (!t || t->symShape.size() != t->shape.size() || !PyObject_HasAttrString(inputs[i], "shape")) continue;
      PyObjectRef shape = PyObjectRef::steal(PyObject_GetAttrString(inputs[i], "shape"));  // new ref
      for (size_t d = 0; shape && d < t->symShape.size(); ++d) {
        if (!plainSymbol(t->symShape[d]) || d >= static_cast<size_t>(PySequence_Size(shape.get()))) continue;
        PyObjectRef size = PyObjectRef::steal(PySequence_GetItem(shape.get(), static_cast<Py_ssize_t>(d)));  // new ref
        if (size) symbols.emplace(t->symShape[d], PyLong_AsLongLong(size.get()));
      }
      PyErr_Clear();
    }
    for (const auto& [symbol, size] : symbols) rec.symbols.push_back(symbol + "=" + std::to_string(size));
    for (size_t i = 0; i < count && i < names.size(); ++i) {
      std::string name = names[i]->source().empty() ? names[i]->name() : names[i]->source();
      PyObjectRef text;
      if (PyLong_CheckExact(inputs[i]) || PyFloat_CheckExact(inputs[i])) {
        text = PyObjectRef::steal(PyObject_Repr(inputs[i]));
      } else if (PyObject_HasAttrString(inputs[i], "shape")) {
        PyObjectRef shape = PyObjectRef::steal(PyObject_GetAttrString(inputs[i], "shape"));
        PyObjectRef list = PyObjectRef::steal(shape ? PySequence_List(shape.get()) : nullptr);
        text = PyObjectRef::steal(list ? PyObject_Repr(list.get()) : nullptr);
      }
      PyErr_Clear();
      if (text) rec.signature.push_back(name + ": " + PyUnicode_AsUTF8(text.get()));
    }
    sink->backendCompiled(rec);
    PyErr_Restore(et, ev, tb);
  }

  core::Graph graph_;
  std::string function_;
  SourceLocation where_;
  bool suppress_;
  FusedOptions options_;
  mutable std::map<std::string, Compiled> bySignature_;  // GIL held
  mutable std::set<std::string> seen_;                   // every signature lowered (GIL held)
  mutable uint64_t clock_ = 0;                           // use counter (GIL held)
  mutable uint64_t entryId_ = 0;
  mutable std::shared_ptr<core::CompiledGraphFn> last_;   // the last call's (GIL held)
  mutable std::string numbers_;  // per input: 'i' / 'f' a value-free number (numberSignature), else '-'
};

}  // namespace

std::unique_ptr<core::CompiledGraphFn> makePerSizeFused(const core::BackendRequest& request) {
  auto fn = std::make_unique<PerSizeFusedFn>(request);
  std::vector<PyObject*> first;
  for (const PyObjectRef& e : request.examples) first.push_back(e.get());
  fn->prime(first);
  return fn;
}

}  // namespace dynamo::backends
