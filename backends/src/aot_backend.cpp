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
#include "dynamo/core/graph_fx.h"

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

class AotBackend final : public core::Backend {
 public:
  explicit AotBackend(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }

  std::unique_ptr<core::CompiledGraphFn> compile(const core::BackendRequest& r) const override {
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
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb != nullptr && ev != nullptr) PyException_SetTraceback(ev, tb);
    std::string why = "Python error";
    if (ev != nullptr) {
      PyObject* s = PyObject_Str(ev);  // new ref
      if (s != nullptr) why = std::string(Py_TYPE(ev)->tp_name) + ": " + PyUnicode_AsUTF8(s);
      Py_XDECREF(s);
      PyErr_Clear();
    }
    core::setBackendFailureCause(ev);  // steals ev: the __cause__ of BackendCompilerFailed
    Py_XDECREF(et);
    Py_XDECREF(tb);
    if (!r.suppressErrors) {
      throw UserError(UserErrorKind::kBackend,
                      "backend '" + name_ + "' failed on the graph of '" + r.function + "': " + why, r.where,
                      "the AOT layer raised while tracing or compiling the captured graph",
                      "try backend=\"eager\" to check the capture itself, or set "
                      "dynamo.config.suppress_errors = True to run this function eagerly");
    }
    throw Error("backend '" + name_ + "' raised " + why);
  }

  std::string name_;
  std::shared_ptr<core::Backend> eager_ = makeEagerBackend();
};

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

}  // namespace dynamo::backends
