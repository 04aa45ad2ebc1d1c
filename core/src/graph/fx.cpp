// Graph -> torch.fx.GraphModule (graph_fx.h), through the bridge's build_graph_module (the
// binding layer's loader gives dynamo.fx_bridge).
#include <unordered_map>

#include "dynamo/common/error.h"
#include "dynamo/core/graph_fx.h"
#include "dynamo/core/graph_python.h"

namespace dynamo::core {
namespace {

FxBridgeLoader bridgeLoader = nullptr;  // GIL held

PyObjectRef str(const std::string& s) {
  return PyObjectRef::steal(
      checkPy(PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()))));
}

void setItem(PyObject* dict, const char* key, const PyObjectRef& value) {
  if (PyDict_SetItemString(dict, key, value.get()) < 0) throw PythonError{};
}

PyObjectRef locationTuple(const SourceLocation& loc) {
  return PyObjectRef::steal(checkPy(
      Py_BuildValue("(sis)", loc.file.c_str(), loc.line, loc.sourceLine.c_str())));  // new ref
}

// The meta dict fx_bridge copies into node.meta: source, location, user_stack, stack_trace,
// tensor_meta = (shape, dtype, device, requires_grad), tensor_layout = (strides, memory_format)
// when the strides are known.
PyObjectRef metaDict(const Node& n) {
  PyObjectRef meta = PyObjectRef::steal(checkPy(PyDict_New()));
  const NodeMeta& m = n.meta();
  if (n.op() == NodeOp::kPlaceholder) setItem(meta.get(), "source", str(n.source()));
  if (m.location.known()) setItem(meta.get(), "location", locationTuple(m.location));
  if (!m.userStack.empty()) {
    PyObjectRef frames = PyObjectRef::steal(checkPy(PyList_New(0)));
    for (const SourceLocation& f : m.userStack) {
      if (PyList_Append(frames.get(), locationTuple(f).get()) < 0) throw PythonError{};
    }
    setItem(meta.get(), "user_stack", frames);
  }
  if (!m.stackTrace.empty()) setItem(meta.get(), "stack_trace", str(m.stackTrace));
  if (m.tensor) {
    PyObjectRef shape = PyObjectRef::steal(checkPy(PyTuple_New(
        static_cast<Py_ssize_t>(m.tensor->shape.size()))));
    for (size_t i = 0; i < m.tensor->shape.size(); ++i) {
      PyTuple_SET_ITEM(shape.get(), static_cast<Py_ssize_t>(i),
                       checkPy(PyLong_FromLongLong(m.tensor->shape[i])));  // steals new ref
    }
    setItem(meta.get(), "tensor_meta",
            PyObjectRef::steal(checkPy(Py_BuildValue(
                "(OssO)", shape.get(), m.tensor->dtype.c_str(), m.tensor->device.c_str(),
                m.tensor->requiresGrad ? Py_True : Py_False))));  // new ref
  }
  if (m.tensor && m.tensor->strides) {
    const std::vector<int64_t>& strides = *m.tensor->strides;
    PyObjectRef tuple = PyObjectRef::steal(checkPy(PyTuple_New(static_cast<Py_ssize_t>(strides.size()))));
    for (size_t i = 0; i < strides.size(); ++i) {
      PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i),
                       checkPy(PyLong_FromLongLong(strides[i])));  // steals new ref
    }
    setItem(meta.get(), "tensor_layout",
            PyObjectRef::steal(checkPy(Py_BuildValue(
                "(Os)", tuple.get(), memoryFormatName(m.tensor->memoryFormat)))));  // new ref
  }
  return meta;
}

}  // namespace

void setFxBridgeLoader(FxBridgeLoader loader) { bridgeLoader = loader; }

PyObjectRef toFxGraphModule(const Graph& graph) {
  DYNAMO_INTERNAL_ASSERT(bridgeLoader != nullptr, "toFxGraphModule: no FX bridge loader set");
  PyObjectRef bridge = bridgeLoader();  // new ref
  PyObjectRef refType =
      PyObjectRef::steal(checkPy(PyObject_GetAttrString(bridge.get(), "NodeRef")));  // new ref
  std::unordered_map<const Node*, PyObjectRef> refs;
  NodeValueFn refOf = [&refs](const NodeRef& n) -> PyObject* { return refs.at(n.get()).get(); };

  PyObjectRef entries = PyObjectRef::steal(checkPy(PyList_New(0)));
  for (const NodeRef& n : graph.nodes()) {
    PyObjectRef target;
    switch (n->op()) {
      case NodeOp::kPlaceholder: target = str(n->name()); break;
      case NodeOp::kCallFunction:
        DYNAMO_USER_CHECK(n->target().hasCallable(), UserErrorKind::kInvalidArgument, "node '",
                          n->name(), "' calls '", n->target().qualifiedName(),
                          "', known by name only: resolve the graph's targets first "
                          "(resolveTargets, Graph.resolve())");
        target = PyObjectRef::borrow(n->target().callable());
        break;
      case NodeOp::kCallMethod: target = str(n->method()); break;
      case NodeOp::kOutput: target = str("output"); break;
    }
    PyObjectRef args = argToPython(Arg::tuple(n->args()), refOf);
    std::vector<std::pair<std::string, Arg>> kw(n->kwargs().begin(), n->kwargs().end());
    PyObjectRef kwargs = argToPython(Arg::dict(std::move(kw)), refOf);
    PyObjectRef entry = PyObjectRef::steal(checkPy(Py_BuildValue(
        "(ssOOOO)", nodeOpName(n->op()), n->name().c_str(), target.get(), args.get(),
        kwargs.get(), metaDict(*n).get())));  // new ref
    if (PyList_Append(entries.get(), entry.get()) < 0) throw PythonError{};
    refs.emplace(n.get(), PyObjectRef::steal(checkPy(
                              PyObject_CallFunction(refType.get(), "s", n->name().c_str()))));
  }
  return PyObjectRef::steal(checkPy(
      PyObject_CallMethod(bridge.get(), "build_graph_module", "(O)", entries.get())));  // new
}

}  // namespace dynamo::core
