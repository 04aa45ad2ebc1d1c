// A user's backend: a Python callable compiler(gm, example_inputs) -> callable, given the graph as
// a torch.fx.GraphModule (core's FX bridge). Its errors: with suppress_errors the function runs
// eagerly (one warning, through Error); without, BackendCompilerFailed (UserError) whose
// __cause__ is what the backend raised.
#include "backends_internal.h"
#include "dynamo/backends/registry.h"
#include "dynamo/core/graph_fx.h"

namespace dynamo::backends {
namespace {

class CallableFn final : public core::CompiledGraphFn {
 public:
  explicit CallableFn(core::PyObjectRef fn) : fn_(std::move(fn)) {}
  // The failing node is not known: failedAt stays as it is.
  PyObject* call(PyObject* const* inputs, size_t count, size_t*) const override {
    return PyObject_Vectorcall(fn_.get(), inputs, count, nullptr);
  }

 private:
  core::PyObjectRef fn_;
};

class CallableBackend final : public core::Backend {
 public:
  CallableBackend(PyObject* callable, std::string name) : callable_(core::PyObjectRef::borrow(callable)), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }

  std::unique_ptr<core::CompiledGraphFn> compile(const core::BackendRequest& r) const override {
    core::PyObjectRef gm = core::toFxGraphModule(r.graph);
    core::PyObjectRef examples = core::PyObjectRef::steal(core::checkPy(PyList_New(0)));
    for (const core::PyObjectRef& t : r.examples) PyList_Append(examples.get(), t.get());
    PyObject* fn = PyObject_CallFunctionObjArgs(callable_.get(), gm.get(), examples.get(), nullptr);  // new
    if (fn == nullptr) failed(r);
    if (!PyCallable_Check(fn)) {
      std::string got = Py_TYPE(fn)->tp_name;
      Py_DECREF(fn);
      // Like a backend that raises: with suppress_errors the function runs eagerly (one warning).
      if (r.suppressErrors)
        throw Error("backend '" + name_ + "' returned a non-callable (" + got + ") instead of a compiled function");
      throw UserError(UserErrorKind::kBackend,
                      "backend '" + name_ + "' returned a non-callable for '" + r.function + "'", r.where,
                      "a backend must return a callable that takes the graph inputs",
                      "return gm.forward (or any callable) from the backend");
    }
    return std::make_unique<CallableFn>(core::PyObjectRef::steal(fn));
  }

 private:
  [[noreturn]] void failed(const core::BackendRequest& r) const {
    throwBackendFailed(r, name_, "the backend raised while compiling the captured graph",
                       "fix the backend, try backend=\"eager\" to check the capture itself, or set "
                       "dynamo.config.suppress_errors = True to run this function eagerly");
  }

  core::PyObjectRef callable_;
  std::string name_;
};

}  // namespace

void throwBackendFailed(const core::BackendRequest& r, const std::string& backend, const char* explanation,
                        const char* hint) {
  PyObject *et, *ev, *tb;  // new refs (or null)
  PyErr_Fetch(&et, &ev, &tb);
  PyErr_NormalizeException(&et, &ev, &tb);
  if (tb != nullptr && ev != nullptr) PyException_SetTraceback(ev, tb);
  std::string why = "Python error";
  if (ev != nullptr) {
    PyObject* str = PyObject_Str(ev);  // new ref
    if (str != nullptr) why = std::string(Py_TYPE(ev)->tp_name) + ": " + PyUnicode_AsUTF8(str);
    Py_XDECREF(str);
    PyErr_Clear();
  }
  core::setBackendFailureCause(ev);  // steals ev: the __cause__ of BackendCompilerFailed
  Py_XDECREF(et);
  Py_XDECREF(tb);
  if (!r.suppressErrors) {
    throw UserError(UserErrorKind::kBackend,
                    "backend '" + backend + "' failed on the graph of '" + r.function + "': " + why, r.where,
                    explanation, hint);
  }
  throw Error("backend '" + backend + "' raised " + why);
}

std::shared_ptr<core::Backend> makeCallableBackend(PyObject* callable, std::string name) {
  return std::make_shared<CallableBackend>(callable, std::move(name));
}

}  // namespace dynamo::backends
