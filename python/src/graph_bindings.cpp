// dynamo._C._graph: a thin Python API over the graph IR (dynamo/core/graph*.h), for tests and
// tools. The real producer of graphs is the C++ symbolic interpreter; this binding only lets
// Python build, print, serialize, convert and run them.
//
//   b = _graph.GraphBuilder()             # or GraphBuilder(graph): start from a graph
//   x = b.placeholder("x", tensor_meta=t, location=("m.py", 3, "x + y"))
//   y = b.call_function(torch.add, (x, 1), {"alpha": 2})
//   z = b.call_method("view", (y, -1))
//   b.output((y, z))
//   g = b.build()                         # Graph: str(g), g.serialize(), g.op_counts(),
//   run = g.runner(); run(t)              # g.to_fx(), g.nodes, g.inputs, g.output, g.users(n)
//   g2 = _graph.read_graph(g.serialize()) # the C++ reader; g2 == g; targets known by name only
//   g2.resolve().runner()(t)              # resolve(): live targets imported by qualified name
//
// Types: Node (read-only view of one node), GraphBuilder, Graph, GraphRunner (vectorcall).
#include <new>

#include "bindings.h"
#include "dynamo/core/graph.h"
#include "dynamo/core/graph_fx.h"
#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_python.h"
#include "dynamo/core/graph_runner.h"
#include "dynamo/core/graph_serializer.h"
#include "py_util.h"

namespace dynamo::py {
namespace {

using core::Arg;
using core::NodeRef;
using core::PyObjectRef;

struct NodeObject {
  PyObject_HEAD
  NodeRef node;  ///< constructed in place by wrapNode, destroyed in nodeDealloc
};

struct BuilderObject {
  PyObject_HEAD
  core::GraphBuilder* builder;  ///< owned
};

struct GraphObject {
  PyObject_HEAD
  core::Graph* graph;  ///< owned
};

struct RunnerObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;   ///< runnerVectorcall; found through tp_vectorcall_offset
  core::GraphRunner* runner;   ///< owned
};

extern PyTypeObject NodeType;
extern PyTypeObject BuilderType;
extern PyTypeObject GraphType;
extern PyTypeObject RunnerType;

// str(o) as UTF-8. o is a new ref (the result of a C API call), released here.
std::string str(PyObject* o) {
  PyObjectRef owned = PyObjectRef::steal(checkPy(o));
  return toString(owned.get());
}

PyObject* wrapNode(const NodeRef& node) {  // new ref
  NodeObject* self = PyObject_New(NodeObject, &NodeType);
  if (self == nullptr) throw core::PythonError{};
  new (&self->node) NodeRef(node);
  return reinterpret_cast<PyObject*>(self);
}

PyObject* wrapGraph(core::Graph graph) {  // new ref
  GraphObject* self = PyObject_New(GraphObject, &GraphType);
  if (self == nullptr) throw core::PythonError{};
  self->graph = new core::Graph(std::move(graph));
  return reinterpret_cast<PyObject*>(self);
}

// ---- Python values -> IR ---------------------------------------------------------------------

UserError badArgument(PyObject* o) {
  return UserError(UserErrorKind::kInvalidArgument,
                   std::string("cannot use a '") + Py_TYPE(o)->tp_name + "' object as a graph argument",
                   {},
                   "graph arguments are nodes, None, bool, int, float, str, torch dtypes, "
                   "devices, memory formats and layouts, Ellipsis, slices, and tuples, lists "
                   "and str-keyed dicts of these",
                   "record the value as a node, or pass it as a graph input");
}

Arg toArg(PyObject* o);  // borrowed ref

std::vector<Arg> toArgList(PyObject* seq) {  // borrowed ref
  PyObjectRef fast = PyObjectRef::steal(checkPy(PySequence_Fast(seq, "expected a sequence")));
  std::vector<Arg> out;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.get());
  for (Py_ssize_t i = 0; i < n; ++i) out.push_back(toArg(PySequence_Fast_GET_ITEM(fast.get(), i)));
  return out;
}

Arg toArg(PyObject* o) {  // borrowed ref
  if (Py_TYPE(o) == &NodeType) return Arg::node(reinterpret_cast<NodeObject*>(o)->node);
  if (o == Py_None) return Arg::none();
  if (PyBool_Check(o)) return Arg::boolean(o == Py_True);
  if (PyLong_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) {
      throw UserError(UserErrorKind::kInvalidArgument, "int graph argument does not fit in 64 bits");
    }
    if (v == -1 && PyErr_Occurred()) throw core::PythonError{};
    return Arg::integer(v);
  }
  if (PyFloat_Check(o)) return Arg::floating(PyFloat_AS_DOUBLE(o));
  if (PyUnicode_Check(o)) return Arg::string(toString(o));
  if (o == Py_Ellipsis) return Arg::ellipsis();
  std::string typeName = Py_TYPE(o)->tp_name;
  if (typeName == "torch.dtype") return Arg::dtype(str(PyObject_Str(o)));
  if (typeName == "torch.device") return Arg::device(str(PyObject_Str(o)));
  if (typeName == "torch.memory_format") return Arg::memoryFormat(str(PyObject_Str(o)));
  if (typeName == "torch.layout") return Arg::layout(str(PyObject_Str(o)));
  if (PySlice_Check(o)) {
    auto part = [o](const char* name) {
      PyObjectRef v = PyObjectRef::steal(checkPy(PyObject_GetAttrString(o, name)));
      return toArg(v.get());
    };
    return Arg::slice(part("start"), part("stop"), part("step"));
  }
  if (PyTuple_Check(o)) return Arg::tuple(toArgList(o));  // torch.Size too
  if (PyList_Check(o)) return Arg::list(toArgList(o));
  if (PyDict_Check(o)) {
    std::vector<std::pair<std::string, Arg>> entries;
    PyObject *key, *value;  // borrowed refs
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &key, &value)) {
      if (!PyUnicode_Check(key)) throw badArgument(key);
      entries.emplace_back(toString(key), toArg(value));
    }
    return Arg::dict(std::move(entries));
  }
  throw badArgument(o);
}

core::Kwargs toKwargs(PyObject* dict) {  // borrowed ref, may be NULL or None
  core::Kwargs out;
  if (dict == nullptr || dict == Py_None) return out;
  if (!PyDict_Check(dict)) {
    throw UserError(UserErrorKind::kInvalidArgument, "kwargs must be a dict of str to arguments");
  }
  PyObject *key, *value;  // borrowed refs
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (!PyUnicode_Check(key)) throw badArgument(key);
    out.emplace_back(toString(key), toArg(value));
  }
  return out;
}

SourceLocation toLocation(PyObject* t) {  // borrowed ref: (file, line, source_line)
  const char* file = nullptr;
  int line = 0;
  const char* text = "";
  if (!PyArg_ParseTuple(t, "si|s;a location is (file, line, source_line)", &file, &line, &text)) {
    throw core::PythonError{};
  }
  return SourceLocation{file, line, text};
}

core::MemoryFormat toMemoryFormat(PyObject* o) {  // borrowed ref
  std::string name = toString(o);
  for (core::MemoryFormat f : {core::MemoryFormat::kContiguous, core::MemoryFormat::kChannelsLast,
                               core::MemoryFormat::kOther}) {
    if (name == core::memoryFormatName(f)) return f;
  }
  throw UserError(UserErrorKind::kInvalidArgument,
                  "memory format must be 'contiguous', 'channels_last' or 'other', not '" + name + "'");
}

// (shape, dtype, device, requires_grad[, strides, memory_format]), or a tensor (all of its meta,
// strides and memory format included, through core::tensorMetaOf).
core::TensorMeta toTensorMeta(PyObject* o) {  // borrowed ref
  if (!PyTuple_Check(o)) return core::tensorMetaOf(o);
  Py_ssize_t size = PyTuple_GET_SIZE(o);
  if (size != 4 && size != 6) {
    throw UserError(UserErrorKind::kInvalidArgument,
                    "tensor_meta must be (shape, dtype, device, requires_grad[, strides, "
                    "memory_format]) or a tensor");
  }
  core::TensorMeta meta;
  for (const Arg& d : toArgList(PyTuple_GET_ITEM(o, 0))) meta.shape.push_back(d.asInt());
  meta.dtype = str(PyObject_Str(PyTuple_GET_ITEM(o, 1)));
  meta.device = str(PyObject_Str(PyTuple_GET_ITEM(o, 2)));
  int flag = PyObject_IsTrue(PyTuple_GET_ITEM(o, 3));
  if (flag < 0) throw core::PythonError{};
  meta.requiresGrad = flag == 1;
  if (size == 6) {
    meta.strides.emplace();
    for (const Arg& d : toArgList(PyTuple_GET_ITEM(o, 4))) meta.strides->push_back(d.asInt());
    meta.memoryFormat = toMemoryFormat(PyTuple_GET_ITEM(o, 5));
  }
  return meta;
}

// The keyword-only metadata arguments shared by every builder method.
struct MetaArgs {
  PyObject* tensorMeta = Py_None;  // borrowed refs
  PyObject* location = Py_None;
  PyObject* userStack = Py_None;
  PyObject* stackTrace = Py_None;

  core::NodeMeta toMeta() const {
    core::NodeMeta meta;
    if (tensorMeta != Py_None) meta.tensor = toTensorMeta(tensorMeta);
    if (location != Py_None) meta.location = toLocation(location);
    if (userStack != Py_None) {
      PyObjectRef fast = PyObjectRef::steal(checkPy(PySequence_Fast(userStack, "user_stack")));
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
        meta.userStack.push_back(toLocation(PySequence_Fast_GET_ITEM(fast.get(), i)));
      }
    }
    if (stackTrace != Py_None) meta.stackTrace = toString(stackTrace);
    return meta;
  }
};

std::string optionalStr(PyObject* o) {  // borrowed ref
  return o == nullptr || o == Py_None ? std::string() : toString(o);
}

// ---- Node ---------------------------------------------------------------------------------------

const core::Node& nodeOf(PyObject* self) { return *reinterpret_cast<NodeObject*>(self)->node; }

void nodeDealloc(PyObject* self) {
  reinterpret_cast<NodeObject*>(self)->node.~NodeRef();
  PyObject_Free(self);
}

PyObject* nodeRepr(PyObject* self) {
  DYNAMO_PY_TRY
  return newStr("<Node " + core::printNode(nodeOf(self)) + ">");
  DYNAMO_PY_CATCH(nullptr)
}

// Hash of the node's address (nodes compare by identity); never -1, which means "error".
Py_hash_t nodeHash(PyObject* self) {
  auto bits = reinterpret_cast<uintptr_t>(&nodeOf(self));
  auto hash = static_cast<Py_hash_t>((bits >> 4) | (bits << (8 * sizeof(bits) - 4)));
  return hash == -1 ? -2 : hash;
}

PyObject* nodeRichCompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || Py_TYPE(b) != &NodeType) Py_RETURN_NOTIMPLEMENTED;
  bool same = &nodeOf(a) == &nodeOf(b);
  return PyBool_FromLong((op == Py_EQ) == same);
}

// Node values as Python objects: nodes are wrapped as Node.
PyObject* nodeArgToPython(const Arg& arg) {
  std::vector<PyObjectRef> keep;  // wrappers made for this conversion
  return core::argToPython(arg, [&keep](const NodeRef& n) -> PyObject* {
           keep.push_back(PyObjectRef::steal(wrapNode(n)));
           return keep.back().get();
         })
      .release();
}

PyObject* nodeGetName(PyObject* self, void*) {
  DYNAMO_PY_TRY return newStr(nodeOf(self).name()); DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetOp(PyObject* self, void*) {
  return PyUnicode_FromString(core::nodeOpName(nodeOf(self).op()));
}
PyObject* nodeGetTarget(PyObject* self, void*) {
  DYNAMO_PY_TRY
  const core::Node& n = nodeOf(self);
  if (n.op() == core::NodeOp::kCallFunction && n.target().hasCallable()) {
    return Py_NewRef(n.target().callable());
  }
  if (n.op() == core::NodeOp::kCallMethod) return newStr(n.method());
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetTargetName(PyObject* self, void*) {
  DYNAMO_PY_TRY
  const core::Node& n = nodeOf(self);
  if (n.op() == core::NodeOp::kCallFunction) return newStr(n.target().qualifiedName());
  if (n.op() == core::NodeOp::kCallMethod) return newStr(n.method());
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetTargetKind(PyObject* self, void*) {
  const core::Node& n = nodeOf(self);
  if (n.op() == core::NodeOp::kCallFunction) return PyUnicode_FromString(core::targetKindName(n.target().kind()));
  Py_RETURN_NONE;
}
PyObject* nodeGetSchema(PyObject* self, void*) {
  DYNAMO_PY_TRY
  const core::Node& n = nodeOf(self);
  if (n.op() == core::NodeOp::kCallFunction && n.target().kind() == core::TargetKind::kAtenOp) {
    return newStr(n.target().schemaName());
  }
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetSource(PyObject* self, void*) {
  DYNAMO_PY_TRY return newStr(nodeOf(self).source()); DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetArgs(PyObject* self, void*) {
  DYNAMO_PY_TRY return nodeArgToPython(Arg::tuple(nodeOf(self).args())); DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetKwargs(PyObject* self, void*) {
  DYNAMO_PY_TRY
  const core::Kwargs& kw = nodeOf(self).kwargs();
  return nodeArgToPython(Arg::dict({kw.begin(), kw.end()}));
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetStackTrace(PyObject* self, void*) {
  DYNAMO_PY_TRY return newStr(nodeOf(self).meta().stackTrace); DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetLocation(PyObject* self, void*) {
  const SourceLocation& loc = nodeOf(self).meta().location;
  if (!loc.known()) Py_RETURN_NONE;
  return Py_BuildValue("(sis)", loc.file.c_str(), loc.line, loc.sourceLine.c_str());
}
PyObject* nodeGetTensorMeta(PyObject* self, void*) {
  DYNAMO_PY_TRY
  const auto& t = nodeOf(self).meta().tensor;
  if (!t) Py_RETURN_NONE;
  std::vector<Arg> dims;
  for (int64_t d : t->shape) dims.push_back(Arg::integer(d));
  PyObjectRef shape = core::constantToPython(Arg::tuple(std::move(dims)));
  return Py_BuildValue("(OssO)", shape.get(), t->dtype.c_str(), t->device.c_str(),
                       t->requiresGrad ? Py_True : Py_False);
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* nodeGetTensorLayout(PyObject* self, void*) {
  DYNAMO_PY_TRY
  const auto& t = nodeOf(self).meta().tensor;
  if (!t || !t->strides) Py_RETURN_NONE;
  std::vector<Arg> strides;
  for (int64_t d : *t->strides) strides.push_back(Arg::integer(d));
  PyObjectRef tuple = core::constantToPython(Arg::tuple(std::move(strides)));
  return Py_BuildValue("(Os)", tuple.get(), core::memoryFormatName(t->memoryFormat));
  DYNAMO_PY_CATCH(nullptr)
}

PyGetSetDef nodeGetSet[] = {
    {"name", nodeGetName, nullptr, "unique name in the graph", nullptr},
    {"op", nodeGetOp, nullptr, "placeholder, call_function, call_method or output", nullptr},
    {"target", nodeGetTarget, nullptr,
     "the callable (None when known by name only: a graph read back by read_graph), or the "
     "method name", nullptr},
    {"target_name", nodeGetTargetName, nullptr, "qualified name of the target", nullptr},
    {"source", nodeGetSource, nullptr, "user source of a placeholder", nullptr},
    {"args", nodeGetArgs, nullptr, "positional arguments (nodes as Node)", nullptr},
    {"kwargs", nodeGetKwargs, nullptr, "keyword arguments", nullptr},
    {"stack_trace", nodeGetStackTrace, nullptr, "stack trace metadata", nullptr},
    {"location", nodeGetLocation, nullptr, "(file, line, source_line) or None", nullptr},
    {"tensor_meta", nodeGetTensorMeta, nullptr, "(shape, dtype, device, requires_grad)", nullptr},
    {"tensor_layout", nodeGetTensorLayout, nullptr,
     "(strides, memory_format) of the tensor meta, or None when unknown", nullptr},
    {"target_kind", nodeGetTargetKind, nullptr, "call_function: function, method or aten", nullptr},
    {"schema", nodeGetSchema, nullptr, "ATen operator targets: 'aten::add.Tensor'", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// ---- GraphBuilder -------------------------------------------------------------------------------

core::GraphBuilder& builderOf(PyObject* self) {
  return *reinterpret_cast<BuilderObject*>(self)->builder;
}

PyObject* builderNew(PyTypeObject* type, PyObject*, PyObject*) {
  BuilderObject* self = reinterpret_cast<BuilderObject*>(type->tp_alloc(type, 0));  // new ref
  if (self != nullptr) self->builder = nullptr;
  return reinterpret_cast<PyObject*>(self);
}

int builderInit(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"graph", nullptr};
  PyObject* base = Py_None;  // borrowed ref
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:GraphBuilder", const_cast<char**>(kwlist),
                                   &base)) {
    return -1;
  }
  if (base != Py_None && Py_TYPE(base) != &GraphType) {
    PyErr_SetString(PyExc_TypeError, "GraphBuilder(graph): graph must be a Graph or None");
    return -1;
  }
  DYNAMO_PY_TRY
  auto* b = reinterpret_cast<BuilderObject*>(self);
  delete b->builder;
  b->builder = base == Py_None
                   ? new core::GraphBuilder()
                   : new core::GraphBuilder(*reinterpret_cast<GraphObject*>(base)->graph);
  return 0;
  DYNAMO_PY_CATCH(-1)
}

void builderDealloc(PyObject* self) {
  delete reinterpret_cast<BuilderObject*>(self)->builder;
  Py_TYPE(self)->tp_free(self);
}

bool checkBuilder(PyObject* self) {
  if (reinterpret_cast<BuilderObject*>(self)->builder != nullptr) return true;
  PyErr_SetString(PyExc_RuntimeError, "GraphBuilder.__init__ was not called");
  return false;
}

PyObject* builderPlaceholder(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"source", "name", "tensor_meta", "location", "user_stack",
                                 "stack_trace", nullptr};
  PyObject *source, *name = Py_None;  // borrowed refs
  MetaArgs m;
  if (!checkBuilder(self) ||
      !PyArg_ParseTupleAndKeywords(args, kwargs, "U|$OOOOO:placeholder",
                                   const_cast<char**>(kwlist), &source, &name, &m.tensorMeta,
                                   &m.location, &m.userStack, &m.stackTrace)) {
    return nullptr;
  }
  DYNAMO_PY_TRY
  return wrapNode(builderOf(self).placeholder(toString(source), m.toMeta(), optionalStr(name)));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* builderCall(PyObject* self, PyObject* args, PyObject* kwargs, bool method) {
  static const char* kwlist[] = {"target", "args", "kwargs", "name", "tensor_meta",
                                 "location", "user_stack", "stack_trace", nullptr};
  PyObject *target, *callArgs = nullptr, *callKwargs = Py_None, *name = Py_None;  // borrowed
  MetaArgs m;
  if (!checkBuilder(self) ||
      !PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO$OOOOO", const_cast<char**>(kwlist),
                                   &target, &callArgs, &callKwargs, &name, &m.tensorMeta,
                                   &m.location, &m.userStack, &m.stackTrace)) {
    return nullptr;
  }
  DYNAMO_PY_TRY
  std::vector<Arg> positional = callArgs ? toArgList(callArgs) : std::vector<Arg>();
  core::Kwargs kw = toKwargs(callKwargs);
  if (method) {
    DYNAMO_USER_CHECK(PyUnicode_Check(target), UserErrorKind::kInvalidArgument,
                      "call_method: the method name must be a str");
    return wrapNode(builderOf(self).callMethod(toString(target), std::move(positional),
                                               std::move(kw), m.toMeta(), optionalStr(name)));
  }
  DYNAMO_USER_CHECK(PyCallable_Check(target), UserErrorKind::kInvalidArgument,
                    "call_function: the target must be callable, not '", Py_TYPE(target)->tp_name,
                    "'");
  return wrapNode(builderOf(self).callFunction(core::Target::fromCallable(target),
                                               std::move(positional), std::move(kw), m.toMeta(),
                                               optionalStr(name)));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* builderCallFunction(PyObject* self, PyObject* args, PyObject* kwargs) {
  return builderCall(self, args, kwargs, false);
}

PyObject* builderCallMethod(PyObject* self, PyObject* args, PyObject* kwargs) {
  return builderCall(self, args, kwargs, true);
}

PyObject* builderOutput(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"value", "tensor_meta", "location", "user_stack",
                                 "stack_trace", nullptr};
  PyObject* value;  // borrowed ref
  MetaArgs m;
  if (!checkBuilder(self) ||
      !PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOOO:output", const_cast<char**>(kwlist),
                                   &value, &m.tensorMeta, &m.location, &m.userStack,
                                   &m.stackTrace)) {
    return nullptr;
  }
  DYNAMO_PY_TRY
  builderOf(self).output(toArg(value), m.toMeta());
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* builderBuild(PyObject* self, PyObject*) {
  if (!checkBuilder(self)) return nullptr;
  DYNAMO_PY_TRY return wrapGraph(builderOf(self).build()); DYNAMO_PY_CATCH(nullptr)
}

Py_ssize_t builderLen(PyObject* self) {
  if (!checkBuilder(self)) return -1;
  return static_cast<Py_ssize_t>(builderOf(self).size());
}

PyMethodDef builderMethods[] = {
    {"placeholder", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(builderPlaceholder)),
     METH_VARARGS | METH_KEYWORDS,
     "placeholder(source, *, name=None, tensor_meta=None, location=None, user_stack=None, "
     "stack_trace=None) -> Node: add a graph input"},
    {"call_function", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(builderCallFunction)),
     METH_VARARGS | METH_KEYWORDS,
     "call_function(target, args=(), kwargs=None, *, name=None, <meta>) -> Node"},
    {"call_method", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(builderCallMethod)),
     METH_VARARGS | METH_KEYWORDS,
     "call_method(method, args=(), kwargs=None, *, name=None, <meta>) -> Node; args[0] is self"},
    {"output", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(builderOutput)),
     METH_VARARGS | METH_KEYWORDS, "output(value, *, <meta>): set the output structure"},
    {"build", builderBuild, METH_NOARGS, "build() -> Graph: freeze the current state"},
    {nullptr, nullptr, 0, nullptr},
};

PySequenceMethods builderSequence = {builderLen, nullptr, nullptr, nullptr,
                                     nullptr,    nullptr, nullptr, nullptr,
                                     nullptr,    nullptr};

// ---- Graph --------------------------------------------------------------------------------------

const core::Graph& graphOf(PyObject* self) { return *reinterpret_cast<GraphObject*>(self)->graph; }

void graphDealloc(PyObject* self) {
  delete reinterpret_cast<GraphObject*>(self)->graph;
  PyObject_Free(self);
}

PyObject* graphStr(PyObject* self) {
  DYNAMO_PY_TRY return newStr(core::printGraph(graphOf(self))); DYNAMO_PY_CATCH(nullptr)
}

PyObject* graphFormat(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"show_locations", "show_tensor_meta", nullptr};
  int locations = 1, meta = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$pp:format", const_cast<char**>(kwlist),
                                   &locations, &meta)) {
    return nullptr;
  }
  DYNAMO_PY_TRY
  core::PrintOptions options;
  options.showLocations = locations != 0;
  options.showTensorMeta = meta != 0;
  return newStr(core::printGraph(graphOf(self), options));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* graphSerialize(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"pretty", nullptr};
  int pretty = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:serialize", const_cast<char**>(kwlist),
                                   &pretty)) {
    return nullptr;
  }
  DYNAMO_PY_TRY
  core::SerializeOptions options;
  options.pretty = pretty != 0;
  return newStr(core::serializeGraph(graphOf(self), options));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* graphOpCounts(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  PyObjectRef out = PyObjectRef::steal(checkPy(PyDict_New()));
  for (const auto& [key, count] : graphOf(self).opCounts()) {
    PyObjectRef n = PyObjectRef::steal(checkPy(PyLong_FromLong(count)));
    if (PyDict_SetItem(out.get(), PyRef::steal(newStr(key)).get(), n.get()) < 0) return nullptr;
  }
  return out.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* graphToFx(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY return core::toFxGraphModule(graphOf(self)).release(); DYNAMO_PY_CATCH(nullptr)
}

PyObject* runnerVectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);

PyObject* graphRunner(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  auto runner = std::make_unique<core::GraphRunner>(graphOf(self));
  RunnerObject* r = PyObject_New(RunnerObject, &RunnerType);  // new ref
  if (r == nullptr) return nullptr;
  r->vectorcall = runnerVectorcall;
  r->runner = runner.release();
  return reinterpret_cast<PyObject*>(r);
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* nodeList(const std::vector<NodeRef>& nodes) {
  PyObjectRef list = PyObjectRef::steal(checkPy(PyList_New(0)));
  for (const NodeRef& n : nodes) {
    PyObjectRef w = PyObjectRef::steal(wrapNode(n));
    if (PyList_Append(list.get(), w.get()) < 0) throw core::PythonError{};
  }
  return list.release();
}

PyObject* graphGetNodes(PyObject* self, void*) {
  DYNAMO_PY_TRY return nodeList(graphOf(self).nodes()); DYNAMO_PY_CATCH(nullptr)
}
PyObject* graphGetInputs(PyObject* self, void*) {
  DYNAMO_PY_TRY return nodeList(graphOf(self).inputs()); DYNAMO_PY_CATCH(nullptr)
}
PyObject* graphGetOutput(PyObject* self, void*) {
  DYNAMO_PY_TRY return wrapNode(graphOf(self).output()); DYNAMO_PY_CATCH(nullptr)
}

PyObject* graphUsers(PyObject* self, PyObject* node) {
  if (Py_TYPE(node) != &NodeType) {
    PyErr_SetString(PyExc_TypeError, "users() takes a Node");
    return nullptr;
  }
  DYNAMO_PY_TRY return nodeList(graphOf(self).users(nodeOf(node))); DYNAMO_PY_CATCH(nullptr)
}

PyObject* graphResolve(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY return wrapGraph(core::resolveTargets(graphOf(self))); DYNAMO_PY_CATCH(nullptr)
}

// Graphs compare by content (core::sameGraph): a graph read back from JSON equals the original.
PyObject* graphRichCompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || Py_TYPE(b) != &GraphType) Py_RETURN_NOTIMPLEMENTED;
  DYNAMO_PY_TRY
  bool same = core::sameGraph(graphOf(a), graphOf(b));
  return PyBool_FromLong((op == Py_EQ) == same);
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* graphFind(PyObject* self, PyObject* name) {
  DYNAMO_PY_TRY
  NodeRef n = graphOf(self).find(toString(name));
  if (!n) Py_RETURN_NONE;
  return wrapNode(n);
  DYNAMO_PY_CATCH(nullptr)
}

Py_ssize_t graphLen(PyObject* self) { return static_cast<Py_ssize_t>(graphOf(self).size()); }

PyMethodDef graphMethods[] = {
    {"format", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(graphFormat)),
     METH_VARARGS | METH_KEYWORDS,
     "format(*, show_locations=True, show_tensor_meta=True) -> str: the printed graph"},
    {"serialize", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(graphSerialize)),
     METH_VARARGS | METH_KEYWORDS, "serialize(*, pretty=False) -> str: JSON for the trace store"},
    {"op_counts", graphOpCounts, METH_NOARGS, "op_counts() -> dict: call nodes by target name"},
    {"to_fx", graphToFx, METH_NOARGS, "to_fx() -> torch.fx.GraphModule"},
    {"runner", graphRunner, METH_NOARGS, "runner() -> GraphRunner: a fast callable"},
    {"find", graphFind, METH_O, "find(name) -> Node or None"},
    {"users", graphUsers, METH_O, "users(node) -> [Node]: the nodes that use node, in order"},
    {"resolve", graphResolve, METH_NOARGS,
     "resolve() -> Graph: the same graph with live call targets, imported by qualified name"},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef graphGetSet[] = {
    {"nodes", graphGetNodes, nullptr, "all nodes: inputs, body, output", nullptr},
    {"inputs", graphGetInputs, nullptr, "the placeholders, in order", nullptr},
    {"output", graphGetOutput, nullptr, "the output node", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PySequenceMethods graphSequence = {graphLen, nullptr, nullptr, nullptr, nullptr,
                                   nullptr,  nullptr, nullptr, nullptr, nullptr};

// ---- GraphRunner --------------------------------------------------------------------------------

PyObject* runnerVectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) {
    PyErr_SetString(PyExc_TypeError, "a graph runner takes its inputs as positional arguments");
    return nullptr;
  }
  const core::GraphRunner& runner = *reinterpret_cast<RunnerObject*>(self)->runner;
  return runner.run(args, static_cast<size_t>(PyVectorcall_NARGS(nargsf)));  // new ref or NULL
}

// run_owned(inputs: list): empties the list, taking its references, and frees each input right
// after its last use (core::GraphRunner::runOwned).
PyObject* runnerRunOwned(PyObject* self, PyObject* list) {
  if (!PyList_CheckExact(list)) {
    PyErr_SetString(PyExc_TypeError, "run_owned() takes a list of the inputs, which it empties");
    return nullptr;
  }
  Py_ssize_t n = PyList_GET_SIZE(list);
  std::vector<PyObject*> inputs(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    inputs[size_t(i)] = PyList_GET_ITEM(list, i);
    Py_INCREF(inputs[size_t(i)]);  // ours now; the list lets go of its own below
  }
  if (PyList_SetSlice(list, 0, n, nullptr) < 0) {
    for (PyObject* o : inputs) Py_DECREF(o);
    return nullptr;
  }
  const core::GraphRunner& runner = *reinterpret_cast<RunnerObject*>(self)->runner;
  return runner.runOwned(inputs.data(), inputs.size());  // steals the inputs; new ref or NULL
}

PyMethodDef runnerMethods[] = {
    {"run_owned", runnerRunOwned, METH_O,
     "run_owned(inputs: list) -> output structure: runs the graph on the list's items, emptying "
     "the list, and frees each input right after its last use"},
    {nullptr, nullptr, 0, nullptr},
};

void runnerDealloc(PyObject* self) {
  delete reinterpret_cast<RunnerObject*>(self)->runner;
  PyObject_Free(self);
}

PyObject* runnerGetGraph(PyObject* self, void*) {
  DYNAMO_PY_TRY return wrapGraph(reinterpret_cast<RunnerObject*>(self)->runner->graph());
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* runnerGetInputCount(PyObject* self, void*) {
  return PyLong_FromSize_t(reinterpret_cast<RunnerObject*>(self)->runner->inputCount());
}
PyObject* runnerGetLastUses(PyObject* self, void*) {
  DYNAMO_PY_TRY
  std::vector<Arg> uses;
  for (int u : reinterpret_cast<RunnerObject*>(self)->runner->lastUses()) {
    uses.push_back(Arg::integer(u));
  }
  return core::constantToPython(Arg::list(std::move(uses))).release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* runnerGetInputLastUses(PyObject* self, void*) {
  DYNAMO_PY_TRY
  std::vector<Arg> uses;
  for (int u : reinterpret_cast<RunnerObject*>(self)->runner->inputLastUses()) {
    uses.push_back(Arg::integer(u));
  }
  return core::constantToPython(Arg::list(std::move(uses))).release();
  DYNAMO_PY_CATCH(nullptr)
}

PyGetSetDef runnerGetSet[] = {
    {"graph", runnerGetGraph, nullptr, "the graph this runner executes", nullptr},
    {"input_count", runnerGetInputCount, nullptr, "number of inputs", nullptr},
    {"last_uses", runnerGetLastUses, nullptr,
     "per slot (inputs, then body nodes): the step after which it is freed; -1 for inputs",
     nullptr},
    {"input_last_uses", runnerGetInputLastUses, nullptr,
     "per input: the step after which run_owned() frees it; -1: unused, freed before the first",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// ---- types and module -----------------------------------------------------------------------------

// Static types, zero-initialized here and filled in by readyTypes() (field by field, which reads
// better than positional initializers and does not depend on the PyTypeObject layout order).

PyTypeObject NodeType{};
PyTypeObject BuilderType{};
PyTypeObject GraphType{};
PyTypeObject RunnerType{};

int readyTypes() {
  NodeType.tp_name = "dynamo._C._graph.Node";
  NodeType.tp_basicsize = sizeof(NodeObject);
  NodeType.tp_flags = Py_TPFLAGS_DEFAULT;
  NodeType.tp_doc = "A read-only view of one immutable graph node.";
  NodeType.tp_dealloc = nodeDealloc;
  NodeType.tp_repr = nodeRepr;
  NodeType.tp_hash = nodeHash;
  NodeType.tp_richcompare = nodeRichCompare;
  NodeType.tp_getset = nodeGetSet;

  BuilderType.tp_name = "dynamo._C._graph.GraphBuilder";
  BuilderType.tp_basicsize = sizeof(BuilderObject);
  BuilderType.tp_flags = Py_TPFLAGS_DEFAULT;
  BuilderType.tp_doc = "GraphBuilder(graph=None): append-only builder of an immutable Graph.";
  BuilderType.tp_new = builderNew;
  BuilderType.tp_init = builderInit;
  BuilderType.tp_dealloc = builderDealloc;
  BuilderType.tp_methods = builderMethods;
  BuilderType.tp_as_sequence = &builderSequence;

  GraphType.tp_name = "dynamo._C._graph.Graph";
  GraphType.tp_basicsize = sizeof(GraphObject);
  GraphType.tp_flags = Py_TPFLAGS_DEFAULT;
  GraphType.tp_doc = "An immutable captured graph (made by GraphBuilder.build()).";
  GraphType.tp_dealloc = graphDealloc;
  GraphType.tp_str = graphStr;
  GraphType.tp_methods = graphMethods;
  GraphType.tp_getset = graphGetSet;
  GraphType.tp_richcompare = graphRichCompare;
  GraphType.tp_hash = PyObject_HashNotImplemented;
  GraphType.tp_as_sequence = &graphSequence;

  RunnerType.tp_name = "dynamo._C._graph.GraphRunner";
  RunnerType.tp_basicsize = sizeof(RunnerObject);
  RunnerType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  RunnerType.tp_doc = "Runs a graph: runner(*inputs) -> output structure.";
  RunnerType.tp_dealloc = runnerDealloc;
  RunnerType.tp_vectorcall_offset = offsetof(RunnerObject, vectorcall);
  RunnerType.tp_call = PyVectorcall_Call;
  RunnerType.tp_getset = runnerGetSet;
  RunnerType.tp_methods = runnerMethods;

  for (PyTypeObject* t : {&NodeType, &BuilderType, &GraphType, &RunnerType}) {
    // What PyVarObject_HEAD_INIT would set: one reference, owned by this static storage.
    Py_SET_REFCNT(reinterpret_cast<PyObject*>(t), 1);
    if (PyType_Ready(t) < 0) return -1;
  }
  return 0;
}

PyObject* moduleReadGraph(PyObject*, PyObject* text) {
  DYNAMO_PY_TRY return wrapGraph(core::readGraphJson(toString(text))); DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef moduleMethods[] = {
    {"read_graph", moduleReadGraph, METH_O,
     "read_graph(text) -> Graph: the C++ reader of serialized graphs (targets by name only; "
     "resolve() before running)"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int initGraphBindings(PyObject* module) {
  if (readyTypes() < 0) return -1;
  // The Python half of Graph -> torch.fx.GraphModule, imported when first needed.
  core::setFxBridgeLoader([] {
    return core::PyObjectRef::steal(checkPy(PyImport_ImportModule("dynamo.fx_bridge")));  // new ref
  });
  PyObject* sub = PyModule_New("dynamo._C._graph");  // new ref
  if (sub == nullptr) return -1;
  const std::pair<const char*, PyTypeObject*> types[] = {
      {"Node", &NodeType}, {"GraphBuilder", &BuilderType}, {"Graph", &GraphType},
      {"GraphRunner", &RunnerType}};
  for (const auto& [name, type] : types) {
    if (PyModule_AddObjectRef(sub, name, reinterpret_cast<PyObject*>(type)) < 0) {
      Py_DECREF(sub);
      return -1;
    }
  }
  if (PyModule_AddFunctions(sub, moduleMethods) < 0 ||
      PyModule_AddIntConstant(sub, "FORMAT_VERSION", core::kGraphFormatVersion) < 0 ||
      PyModule_AddObject(module, "_graph", sub) < 0) {  // steals sub on success
    Py_DECREF(sub);
    return -1;
  }
  return 0;
}

}  // namespace dynamo::py
