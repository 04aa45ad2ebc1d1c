// "aot_eager", "aot_eager_default_partitioner", "aot_eager_decomp_partition" (backends.def): the
// AOT layer. The captured graph goes to python/dynamo/aot as a torch.fx.GraphModule; there the
// joint forward/backward graph is traced at the ATen level (functorch's make_fx), imported into
// core's IR, partitioned (backends/partition.h, through dynamo._C._aot) and wrapped in a
// torch.autograd.Function whose forward and backward run on core's GraphRunner. What comes back
// is a callable over the graph inputs.
//
// When the AOT layer cannot promise eager's results for a graph (an output aliasing an input, a
// tensor the tracer cannot handle, an op without a meta kernel, ...) it returns the reason
// instead of a callable: the graph then runs on the "eager" backend's C++ runner, and the reason
// is logged (DYNAMO_LOGS=aot_graphs) and recorded in the trace store (artifact dynamo.aot).
#include "backends_internal.h"
#include "dynamo/core/compile_sink.h"
#include "dynamo/core/graph_fx.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>

namespace dynamo::backends {
namespace {

class AotFn final : public core::CompiledGraphFn {
 public:
  explicit AotFn(core::PyObjectRef fn) : fn_(std::move(fn)) {}
  // The failing node is not known (it ran inside an autograd.Function): failedAt stays.
  PyObject* call(PyObject* const* inputs, size_t count, size_t*) const override {
    return PyObject_Vectorcall(fn_.get(), inputs, count, nullptr);
  }

 private:
  core::PyObjectRef fn_;
};

class AotBackend;

// A graph with dynamic sizes (BackendRequest::dynamic): the AOT layer traces with the example
// sizes, so each distinct input signature (tensor sizes and strides, int and float values) gets its own
// AOT compile, made on the first call with it and kept in this cache entry. The function itself
// is not recompiled, and no call runs eagerly for want of a cache entry.
class PerSizeAotFn final : public core::CompiledGraphFn {
 public:
  PerSizeAotFn(const AotBackend& backend, const core::BackendRequest& r)
      : backend_(backend), graph_(r.graph), function_(r.function), where_(r.where), suppress_(r.suppressErrors) {}
  PyObject* call(PyObject* const* inputs, size_t count, size_t* failedAt) const override;
  /// Compiles for the example inputs now (errors surface at compile time, as without sizes).
  /// The "fused" preset first runs the probe lowering (probeFirst), so that the first size's
  /// kernels already take the sizes that vary as parameters.
  void prime(const std::vector<PyObject*>& examples) const {
    probeFirst(examples);
    forInputs(examples.data(), examples.size());
  }
  void entryMade(uint64_t entryId) const override { entryId_ = entryId; }

 private:
  const core::CompiledGraphFn& forInputs(PyObject* const* inputs, size_t count) const;
  void probeFirst(const std::vector<PyObject*>& examples) const;
  // The key of a call: per input, a tensor's sizes and strides, an int's or float's value, else its type.
  static std::string signature(PyObject* const* inputs, size_t count);
  // Hands one compile to the trace store's sink: the inputs' sizes and numbers, its time, and
  // the AOT layer's record of it (taken from the AOT layer's queue, so that it is not linked to
  // the next compile of the process).
  void record(PyObject* const* inputs, size_t count, double ms) const;

  const AotBackend& backend_;  // the compiler's backend outlives its cache entries
  core::Graph graph_;
  std::string function_;
  SourceLocation where_;
  bool suppress_;
  mutable std::map<std::string, std::unique_ptr<core::CompiledGraphFn>> bySignature_;  // GIL held
  mutable uint64_t entryId_ = 0;  // 0 until the entry is made (the first compile is part of it)
};

class AotBackend final : public core::Backend {
 public:
  explicit AotBackend(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }

  std::unique_ptr<core::CompiledGraphFn> compile(const core::BackendRequest& r) const override {
    if (r.dynamic) {
      auto fn = std::make_unique<PerSizeAotFn>(*this, r);
      std::vector<PyObject*> first;
      for (const core::PyObjectRef& e : r.examples) first.push_back(e.get());
      fn->prime(first);
      return fn;
    }
    return compileStatic(r);
  }

  /// dynamo.aot.probe_graph(gm, examples, grow, backend, function, file, line): the kernels the
  /// probe lowering registered (0: none). Python errors propagate (core::PythonError).
  size_t probe(const core::BackendRequest& r, PyObject* grow) const {
    core::PyObjectRef gm = core::toFxGraphModule(r.graph);
    core::PyObjectRef module = core::PyObjectRef::steal(core::checkPy(PyImport_ImportModule("dynamo.aot")));
    core::PyObjectRef examples = core::PyObjectRef::steal(core::checkPy(PyList_New(0)));
    for (const core::PyObjectRef& t : r.examples) {
      if (PyList_Append(examples.get(), t.get()) < 0) throw core::PythonError{};
    }
    core::PyObjectRef n = core::PyObjectRef::steal(core::checkPy(
        PyObject_CallMethod(module.get(), "probe_graph", "OOOsssi", gm.get(), examples.get(), grow, name_.c_str(),
                            r.function.c_str(), r.where.file.c_str(), static_cast<int>(r.where.line))));
    return PyLong_AsSize_t(n.get());
  }

  std::unique_ptr<core::CompiledGraphFn> compileStatic(const core::BackendRequest& r) const {
    core::PyObjectRef result = callPython(r);
    if (PyUnicode_Check(result.get())) return eager_->compile(r);  // the fallback reason
    return std::make_unique<AotFn>(std::move(result));
  }

 private:
  // dynamo.aot.compile_graph(gm, examples, backend, function, file, line): a callable, or a str
  // (the reason to fall back to the eager runner).
  core::PyObjectRef callPython(const core::BackendRequest& r) const {
    try {
      core::PyObjectRef gm = core::toFxGraphModule(r.graph);
      core::PyObjectRef module = core::PyObjectRef::steal(core::checkPy(PyImport_ImportModule("dynamo.aot")));
      core::PyObjectRef examples = core::PyObjectRef::steal(core::checkPy(PyList_New(0)));
      for (const core::PyObjectRef& t : r.examples) {
        if (PyList_Append(examples.get(), t.get()) < 0) throw core::PythonError{};
      }
      PyObject* out = PyObject_CallMethod(module.get(), "compile_graph", "OOsssi", gm.get(), examples.get(),
                                          name_.c_str(), r.function.c_str(), r.where.file.c_str(),
                                          static_cast<int>(r.where.line));  // new ref
      if (out == nullptr) throw core::PythonError{};
      return core::PyObjectRef::steal(out);
    } catch (const core::PythonError&) {
      failed(r);
    }
  }

  [[noreturn]] void failed(const core::BackendRequest& r) const {
    throwBackendFailed(r, name_, "the AOT layer raised while tracing or compiling the captured graph",
                       "try backend=\"eager\" to check the capture itself, or set "
                       "dynamo.config.suppress_errors = True to run this function eagerly");
  }

  std::string name_;
  std::shared_ptr<core::Backend> eager_ = makeEagerBackend();
};

using core::PyObjectRef;

std::string PerSizeAotFn::signature(PyObject* const* inputs, size_t count) { return inputSignature(inputs, count); }

}  // namespace

std::string inputSignature(PyObject* const* inputs, size_t count) {
  std::string key;
  for (size_t i = 0; i < count; ++i) {
    PyObject* in = inputs[i];  // borrowed
    if (PyLong_CheckExact(in) || PyFloat_CheckExact(in)) {
      // A float's repr round-trips: two floats share a key only when they are the same value.
      PyObjectRef text = PyObjectRef::steal(PyObject_Repr(in));
      key += (PyLong_CheckExact(in) ? "i" : "f") + std::string(text ? PyUnicode_AsUTF8(text.get()) : "?") + ";";
    } else if (PyObject_HasAttrString(in, "stride") && PyObject_HasAttrString(in, "shape")) {
      PyObjectRef shape = PyObjectRef::steal(PyObject_GetAttrString(in, "shape"));
      PyObjectRef stride = PyObjectRef::steal(PyObject_CallMethod(in, "stride", nullptr));
      PyObjectRef a = PyObjectRef::steal(shape ? PyObject_Repr(shape.get()) : nullptr);
      PyObjectRef b = PyObjectRef::steal(stride ? PyObject_Repr(stride.get()) : nullptr);
      key += "t" + std::string(a ? PyUnicode_AsUTF8(a.get()) : "?") + std::string(b ? PyUnicode_AsUTF8(b.get()) : "?") + ";";
    } else {
      key += std::string("o") + Py_TYPE(in)->tp_name + ";";
    }
    PyErr_Clear();
  }
  return key;
}

namespace {

const core::CompiledGraphFn& PerSizeAotFn::forInputs(PyObject* const* inputs, size_t count) const {
  std::string key = signature(inputs, count);
  auto it = bySignature_.find(key);
  if (it != bySignature_.end()) return *it->second;
  std::vector<core::PyObjectRef> examples;
  for (size_t i = 0; i < count; ++i) examples.push_back(core::PyObjectRef::borrow(inputs[i]));
  core::BackendRequest r{graph_, examples, function_, where_, suppress_};
  auto start = std::chrono::steady_clock::now();
  auto fn = backend_.compileStatic(r);
  record(inputs, count, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return *bySignature_.emplace(key, std::move(fn)).first->second;
}

// The probe lowering of the "fused" preset: the dimensions that are a plain symbol in the
// placeholders' symShape (duck-sized ones alike) each one larger than the first call's. Skipped
// when an input dimension is an expression of symbols (it cannot be grown alone); a probe that
// fails only leaves the first size's kernels literal (DYNAMO_LOGS=fusion says why).
void PerSizeAotFn::probeFirst(const std::vector<PyObject*>& examples) const {
  if (backend_.name() != "fused" || PyErr_Occurred()) return;
  const std::vector<core::NodeRef>& ins = graph_.inputs();
  PyObjectRef grow = PyObjectRef::steal(core::checkPy(PyList_New(0)));
  bool any = false;
  for (size_t i = 0; i < examples.size() && i < ins.size(); ++i) {
    PyObjectRef dims = PyObjectRef::steal(core::checkPy(PyList_New(0)));
    const auto& t = ins[i]->meta().tensor;
    for (size_t d = 0; t && d < t->symShape.size(); ++d) {
      const std::string& e = t->symShape[d];
      if (e.empty()) continue;
      if (!plainSymbol(e)) return;
      PyObjectRef dim = PyObjectRef::steal(core::checkPy(PyLong_FromSize_t(d)));
      if (PyList_Append(dims.get(), dim.get()) < 0) throw core::PythonError{};
      any = true;
    }
    if (PyList_Append(grow.get(), dims.get()) < 0) throw core::PythonError{};
  }
  if (!any) return;
  std::vector<core::PyObjectRef> ex;
  for (PyObject* e : examples) ex.push_back(core::PyObjectRef::borrow(e));
  core::BackendRequest r{graph_, ex, function_, where_, suppress_};
  try {
    backend_.probe(r, grow.get());
  } catch (const core::PythonError&) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  // new refs (or null)
    if (logEnabled("fusion")) {
      PyObjectRef text = PyObjectRef::steal(ev ? PyObject_Str(ev) : nullptr);
      std::fprintf(stderr, "[dynamo fusion] %s: no probe lowering of the AOT graphs (the first size's kernels keep literal sizes): %s\n",
                   function_.c_str(), text ? PyUnicode_AsUTF8(text.get()) : "Python error");
    }
    PyErr_Clear();
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
  }
}

void PerSizeAotFn::record(PyObject* const* inputs, size_t count, double ms) const {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  core::BackendCompileRecord rec;
  rec.entryId = entryId_;
  rec.backend = backend_.name();
  rec.ms = ms;
  const std::vector<core::NodeRef>& names = graph_.inputs();
  for (size_t i = 0; i < count; ++i) {
    PyObject* in = inputs[i];  // borrowed
    std::string name = i < names.size() ? names[i]->source() : "input " + std::to_string(i);
    if (name.empty() && i < names.size()) name = names[i]->name();
    PyObjectRef text;
    if (PyLong_CheckExact(in) || PyFloat_CheckExact(in)) {
      text = PyObjectRef::steal(PyObject_Repr(in));
    } else if (PyObject_HasAttrString(in, "shape")) {
      PyObjectRef shape = PyObjectRef::steal(PyObject_GetAttrString(in, "shape"));
      PyObjectRef list = PyObjectRef::steal(shape ? PySequence_List(shape.get()) : nullptr);
      text = PyObjectRef::steal(list ? PyObject_Repr(list.get()) : nullptr);
    }
    PyErr_Clear();
    if (text) rec.signature.push_back(name + ": " + PyUnicode_AsUTF8(text.get()));
  }
  // The AOT layer's record of this compile (python/dynamo/aot: take_pending_json).
  if (entryId_ != 0) {
    PyObjectRef module = PyObjectRef::steal(PyImport_ImportModule("dynamo.aot"));
    PyObjectRef json = PyObjectRef::steal(module ? PyObject_CallMethod(module.get(), "take_pending_json", "K", static_cast<unsigned long long>(entryId_)) : nullptr);
    if (json && PyUnicode_Check(json.get())) rec.detailJson = PyUnicode_AsUTF8(json.get());
    PyErr_Clear();
  }
  if (const auto& sink = core::compileSink()) sink->backendCompiled(rec);
  PyErr_Restore(et, ev, tb);
}

PyObject* PerSizeAotFn::call(PyObject* const* inputs, size_t count, size_t* failedAt) const {
  const core::CompiledGraphFn* fn = nullptr;
  try {
    fn = &forInputs(inputs, count);
  } catch (const std::exception& e) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_RuntimeError, (std::string("dynamo: compiling the graph for new input sizes failed: ") + e.what()).c_str());
    return nullptr;
  }
  return fn->call(inputs, count, failedAt);
}

}  // namespace

std::shared_ptr<core::Backend> makeAotBackend(const std::string& preset) {
  return std::make_shared<AotBackend>(preset);
}
std::shared_ptr<core::Backend> makeAotEagerBackend() { return std::make_shared<AotBackend>("aot_eager"); }
std::shared_ptr<core::Backend> makeAotEagerDefaultPartitionerBackend() {
  return std::make_shared<AotBackend>("aot_eager_default_partitioner");
}
std::shared_ptr<core::Backend> makeAotEagerDecompPartitionBackend() {
  return std::make_shared<AotBackend>("aot_eager_decomp_partition");
}

bool plainSymbol(const std::string& e) {
  if (e.empty()) return false;
  for (char c : e)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

}  // namespace dynamo::backends
