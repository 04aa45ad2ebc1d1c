// _dynamo_testing.guards: a thin test API over sources and guards (the interpreter uses the C++ API).
//
//   from _dynamo_testing import guards as g
//   x = g.local(0, "x"); w = g.local(1, "self").module_attr("fc1").module_attr("weight")
//   b = g.GuardSetBuilder()
//   b.add("TENSOR_MATCH", x, tensor, where=("model.py", 12, "y = x.view(4, -1)"))
//   b.add("GRAD_MODE")                      # global-state guards take no source
//   gs = b.build()
//   gs.check([x_value, self_value], globals())  -> bool
//   gs.failures(...) -> [{"kind", "source", "reason", "file", "line", "code", "text"}]
//   gs.describe(); gs.bench(locals, globals, n) -> ns per GuardSet::check
//   g.guard_kinds() -> [(name, cost, description)];  g.module_attr_plan(module, "weight")
//
// The `value` argument of add() per kind: TYPE_MATCH an example object, ID_MATCH the object,
// EQUALS_MATCH the constant, TENSOR_MATCH an example tensor, LENGTH_CHECK the length (int),
// DICT_KEYS an example dict, HASATTR the attribute name (present=... keyword), GRAD_MODE the
// expected bool (None = current), DEFAULT_DTYPE / IS_NONE / NOT_NONE nothing.
#include <chrono>
#include <cstring>
#include <string>

#include "testing_bindings.h"
#include "dynamo/core/guards.h"
#include "dynamo/core/source.h"
#include "py_util.h"

namespace dynamo::py {

namespace {

using core::FrameValues;
using core::Source;

// ---- Source -----------------------------------------------------------------------------------

struct PySource {
  PyObject_HEAD
  Source* source;  // owned
};

// The types, created from specs at init (heap types: borrowed refs owned by the module).
PyTypeObject* sourceType = nullptr;
PyTypeObject* builderType = nullptr;
PyTypeObject* guardSetType = nullptr;

PyObject* wrapSource(Source s) {
  PySource* self = PyObject_New(PySource, sourceType);  // new ref
  if (self == nullptr) return nullptr;
  self->source = new Source(std::move(s));
  return reinterpret_cast<PyObject*>(self);
}

// The Source inside a PySource, or a TypeError.
const Source& unwrapSource(PyObject* o) {
  if (!PyObject_TypeCheck(o, sourceType)) {
    throw UserError(UserErrorKind::kInvalidArgument,
                    std::string("expected a _dynamo_testing.guards.Source, got ") + Py_TYPE(o)->tp_name);
  }
  return *reinterpret_cast<PySource*>(o)->source;
}

void sourceDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);  // borrowed ref; instances of heap types own one
  delete reinterpret_cast<PySource*>(self)->source;
  PyObject_Free(self);
  Py_DECREF(type);
}

PyObject* sourceRepr(PyObject* self) {
  DYNAMO_PY_TRY
  return PyUnicode_FromFormat("<Source %s>", unwrapSource(self).name().c_str());  // new ref
  DYNAMO_PY_CATCH(nullptr)
}

Py_hash_t sourceHash(PyObject* self) {
  Py_hash_t h = static_cast<Py_hash_t>(unwrapSource(self).hash());
  return h == -1 ? -2 : h;
}

PyObject* sourceCompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(b, sourceType)) Py_RETURN_NOTIMPLEMENTED;
  bool eq = unwrapSource(a) == unwrapSource(b);
  return PyBool_FromLong(op == Py_EQ ? eq : !eq);  // new ref
}

PyObject* sourceName(PyObject* self, void*) {
  return PyUnicode_FromString(unwrapSource(self).name().c_str());  // new ref
}

PyObject* sourceAttr(PyObject* self, PyObject* arg) {
  DYNAMO_PY_TRY
  return wrapSource(Source::attr(unwrapSource(self), toString(arg)));
  DYNAMO_PY_CATCH(nullptr)
}

core::ModuleSlot slotFromName(const std::string& name) {
  for (core::ModuleSlot s : {core::ModuleSlot::kInstanceDict, core::ModuleSlot::kParameters,
                             core::ModuleSlot::kBuffers, core::ModuleSlot::kModules}) {
    if (name == core::moduleSlotName(s)) return s;
  }
  throw UserError(UserErrorKind::kInvalidArgument,
                  "found_in must be 'attribute', 'parameter', 'buffer' or 'submodule', got '" +
                      name + "'");
}

PyObject* sourceModuleAttr(PyObject* self, PyObject* args, PyObject* kwargs) {
  DYNAMO_PY_TRY
  static const char* kwlist[] = {"name", "found_in", nullptr};
  const char* name = nullptr;
  const char* foundIn = "attribute";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|s", const_cast<char**>(kwlist), &name,
                                   &foundIn)) {
    return nullptr;
  }
  return wrapSource(Source::moduleAttr(unwrapSource(self), name, slotFromName(foundIn)));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* sourceItem(PyObject* self, PyObject* key) {
  DYNAMO_PY_TRY
  return wrapSource(Source::item(unwrapSource(self), key));
  DYNAMO_PY_CATCH(nullptr)
}

// Frame values from Python arguments: `locals` a list/tuple (kept alive in `holder`).
FrameValues frameFrom(PyObject* locals, PyObject* globals, PyObject* builtins, PyRef& holder) {
  holder = PyRef::steal(checkPy(PySequence_Fast(locals, "locals must be a list or tuple")));
  FrameValues f;
  f.locals = PySequence_Fast_ITEMS(holder.get());  // borrowed refs, owned by holder
  f.nlocals = static_cast<int>(PySequence_Fast_GET_SIZE(holder.get()));
  f.globals = globals;
  f.builtins = (builtins == nullptr || builtins == Py_None) ? PyEval_GetBuiltins() : builtins;
  return f;
}

PyObject* sourceFetch(PyObject* self, PyObject* args, PyObject* kwargs) {
  DYNAMO_PY_TRY
  static const char* kwlist[] = {"locals", "globals", "builtins", nullptr};
  PyObject *locals = nullptr, *globals = nullptr, *builtins = nullptr;  // borrowed refs
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O", const_cast<char**>(kwlist), &locals,
                                   &globals, &builtins)) {
    return nullptr;
  }
  PyRef holder;
  FrameValues f = frameFrom(locals, globals, builtins, holder);
  return unwrapSource(self).fetch(f);  // new ref or NULL with the error set
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef sourceMethods[] = {
    {"attr", sourceAttr, METH_O, "getattr(self, name) as a Source."},
    {"module_attr", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(sourceModuleAttr)),
     METH_VARARGS | METH_KEYWORDS,
     "module_attr(name, found_in='attribute'): nn.Module attribute through the fast path."},
    {"item", sourceItem, METH_O, "self[key] as a Source."},
    {"fetch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(sourceFetch)),
     METH_VARARGS | METH_KEYWORDS, "fetch(locals, globals, builtins=None): the value."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef sourceGetSet[] = {
    {"name", sourceName, nullptr, "The source as the user wrote it.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// ---- GuardSetBuilder --------------------------------------------------------------------------

struct PyBuilder {
  PyObject_HEAD
  core::GuardSetBuilder* builder;  // owned
};

struct PyGuardSet {
  PyObject_HEAD
  core::GuardSet* set;  // owned
};


PyObject* builderNew(PyTypeObject* type, PyObject*, PyObject*) {
  PyObject* self = type->tp_alloc(type, 0);  // new ref
  if (self == nullptr) return nullptr;
  reinterpret_cast<PyBuilder*>(self)->builder = new core::GuardSetBuilder();
  return self;
}

void builderDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);  // borrowed ref; instances of heap types own one
  delete reinterpret_cast<PyBuilder*>(self)->builder;
  type->tp_free(self);
  Py_DECREF(type);
}

core::GuardKind kindFromName(const std::string& name) {
  for (const core::GuardKindInfo& k : core::guardKinds()) {
    if (name == k.name) return k.kind;
  }
  throw UserError(UserErrorKind::kInvalidArgument, "unknown guard kind '" + name + "'", {},
                  "", "_dynamo_testing.guards.guard_kinds() lists the kinds");
}

SourceLocation whereFrom(PyObject* where) {
  SourceLocation loc;
  if (where == nullptr || where == Py_None) return loc;
  const char* file = nullptr;
  const char* code = "";
  int line = 0;
  if (!PyArg_ParseTuple(where, "si|s;where must be (file, line[, source_line])", &file, &line,
                        &code)) {
    throw PythonError{};
  }
  loc.file = file;
  loc.line = line;
  loc.sourceLine = code;
  return loc;
}

core::LeafGuardPtr makeGuard(core::GuardKind kind, PyObject* value, int present) {
  auto need = [&](const char* what) {
    if (value == nullptr) {
      throw UserError(UserErrorKind::kInvalidArgument,
                      std::string(core::guardKindInfo(kind).name) + " needs a value: " + what);
    }
  };
  switch (kind) {
    case core::GuardKind::kTypeMatch: need("an example object"); return core::makeTypeMatch(value);
    case core::GuardKind::kIdMatch: need("the object"); return core::makeIdMatch(value);
    case core::GuardKind::kEqualsMatch: need("the constant"); return core::makeEqualsMatch(value);
    case core::GuardKind::kTensorMatch: need("an example tensor"); return core::makeTensorMatch(value);
    case core::GuardKind::kLengthCheck: {
      need("the length");
      Py_ssize_t n = PyNumber_AsSsize_t(value, PyExc_OverflowError);
      if (n == -1 && PyErr_Occurred()) throw PythonError{};
      return core::makeLengthCheck(n);
    }
    case core::GuardKind::kDictKeys: need("an example dict"); return core::makeDictKeys(value);
    case core::GuardKind::kIsNone: return core::makeIsNone();
    case core::GuardKind::kNotNone: return core::makeNotNone();
    case core::GuardKind::kHasAttr: need("the attribute name"); return core::makeHasAttr(toString(value), present != 0);
    case core::GuardKind::kModuleCall: return core::makeModuleCall();
    case core::GuardKind::kNoInstanceAttr: need("the attribute name"); return core::makeNoInstanceAttr(toString(value));
    case core::GuardKind::kGradMode:
      if (value == nullptr || value == Py_None) return core::makeGradModeFromCurrent();
      return core::makeGradMode(PyObject_IsTrue(value) == 1);
    case core::GuardKind::kDefaultDtype: return core::makeDefaultDtypeFromCurrent();
    case core::GuardKind::kAutocast: return core::makeAutocastFromCurrent();
    case core::GuardKind::kInferenceMode: return core::makeInferenceModeFromCurrent();
  }
  throw UserError(UserErrorKind::kInvalidArgument, "unsupported guard kind");
}

PyObject* builderAdd(PyObject* self, PyObject* args, PyObject* kwargs) {
  DYNAMO_PY_TRY
  static const char* kwlist[] = {"kind", "source", "value", "where", "present", nullptr};
  const char* kind = nullptr;
  PyObject *source = Py_None, *value = nullptr, *where = nullptr;  // borrowed refs
  int present = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|OO$Op", const_cast<char**>(kwlist), &kind,
                                   &source, &value, &where, &present)) {
    return nullptr;
  }
  core::GuardKind k = kindFromName(kind);
  Source src = source == Py_None ? Source() : unwrapSource(source);
  core::LeafGuardPtr guard = makeGuard(k, value, present);
  bool added = reinterpret_cast<PyBuilder*>(self)->builder->add(src, std::move(guard),
                                                               whereFrom(where));
  return PyBool_FromLong(added);  // new ref
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* builderBuild(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  PyGuardSet* out = PyObject_New(PyGuardSet, guardSetType);  // new ref
  if (out == nullptr) return nullptr;
  out->set = new core::GuardSet(reinterpret_cast<PyBuilder*>(self)->builder->build());
  return reinterpret_cast<PyObject*>(out);
  DYNAMO_PY_CATCH(nullptr)
}

Py_ssize_t builderLen(PyObject* self) {
  return static_cast<Py_ssize_t>(reinterpret_cast<PyBuilder*>(self)->builder->size());
}

PyMethodDef builderMethods[] = {
    {"add", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(builderAdd)),
     METH_VARARGS | METH_KEYWORDS,
     "add(kind, source=None, value=None, *, where=(file, line, code), present=True) -> bool "
     "(False: a duplicate, dropped)."},
    {"build", builderBuild, METH_NOARGS, "The GuardSet; empties the builder."},
    {nullptr, nullptr, 0, nullptr}};

// ---- GuardSet ---------------------------------------------------------------------------------

void guardSetDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);  // borrowed ref; instances of heap types own one
  delete reinterpret_cast<PyGuardSet*>(self)->set;
  PyObject_Free(self);
  Py_DECREF(type);
}

const core::GuardSet& unwrapSet(PyObject* self) { return *reinterpret_cast<PyGuardSet*>(self)->set; }

// Parses (locals, globals, builtins=None[, extra int]) into a FrameValues.
bool parseFrame(PyObject* args, PyObject* kwargs, FrameValues& f, PyRef& holder,
                Py_ssize_t* count) {
  static const char* kwlist[] = {"locals", "globals", "builtins", nullptr};
  static const char* kwlistN[] = {"locals", "globals", "n", "builtins", nullptr};
  PyObject *locals = nullptr, *globals = nullptr, *builtins = nullptr;  // borrowed refs
  bool ok = count == nullptr
                ? PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O", const_cast<char**>(kwlist),
                                              &locals, &globals, &builtins)
                : PyArg_ParseTupleAndKeywords(args, kwargs, "OOn|O", const_cast<char**>(kwlistN),
                                              &locals, &globals, count, &builtins);
  if (!ok) return false;
  f = frameFrom(locals, globals, builtins, holder);
  return true;
}

// FrameValues::localAt over a list: exercises the callback path the frame hook uses.
PyObject* listSlot(const void* context, int slot) {
  return PySequence_Fast_ITEMS(static_cast<PyObject*>(const_cast<void*>(context)))[slot];  // borrowed
}

PyObject* guardSetCheck(PyObject* self, PyObject* args, PyObject* kwargs) {
  DYNAMO_PY_TRY
  FrameValues f;
  PyRef holder;
  if (!parseFrame(args, kwargs, f, holder, nullptr)) return nullptr;
  return PyBool_FromLong(unwrapSet(self).check(f));  // new ref
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* guardSetCheckViaAccessor(PyObject* self, PyObject* args, PyObject* kwargs) {
  DYNAMO_PY_TRY
  FrameValues f;
  PyRef holder;
  if (!parseFrame(args, kwargs, f, holder, nullptr)) return nullptr;
  f.locals = nullptr;
  f.context = holder.get();
  f.localAt = listSlot;
  return PyBool_FromLong(unwrapSet(self).check(f));  // new ref
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* locationDict(PyObject* d, const SourceLocation& where) {
  PyRef file = PyRef::steal(where.known() ? PyUnicode_FromString(where.file.c_str())
                                          : (Py_INCREF(Py_None), Py_None));
  PyRef line = PyRef::steal(PyLong_FromLong(where.line));
  PyRef code = PyRef::steal(PyUnicode_FromString(where.sourceLine.c_str()));
  if (!file || !line || !code || PyDict_SetItemString(d, "file", file.get()) < 0 ||
      PyDict_SetItemString(d, "line", line.get()) < 0 ||
      PyDict_SetItemString(d, "code", code.get()) < 0) {
    return nullptr;
  }
  return d;
}

PyObject* guardSetFailures(PyObject* self, PyObject* args, PyObject* kwargs) {
  DYNAMO_PY_TRY
  FrameValues f;
  PyRef holder;
  if (!parseFrame(args, kwargs, f, holder, nullptr)) return nullptr;
  std::vector<core::GuardFailure> failures = unwrapSet(self).failures(f);
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  for (const core::GuardFailure& fail : failures) {
    PyRef d = PyRef::steal(checkPy(Py_BuildValue(
        "{s:s,s:s,s:s,s:s}", "kind", core::guardKindInfo(fail.kind).name, "source",
        fail.sourceName.c_str(), "reason", fail.reason.c_str(), "text", fail.str().c_str())));
    checkPy(locationDict(d.get(), fail.where));
    if (PyList_Append(list.get(), d.get()) < 0) return nullptr;
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* guardSetGuards(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  for (const core::GuardInfo& g : unwrapSet(self).guards()) {
    PyRef d = PyRef::steal(checkPy(Py_BuildValue("{s:s,s:s,s:s}", "kind", g.kindName.c_str(),
                                               "source", g.sourceName.c_str(), "checked",
                                               g.checked.c_str())));
    checkPy(locationDict(d.get(), g.where));
    if (PyList_Append(list.get(), d.get()) < 0) return nullptr;
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* guardSetDescribe(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  return PyUnicode_FromString(unwrapSet(self).describe().c_str());  // new ref
  DYNAMO_PY_CATCH(nullptr)
}

// Runs check() n times in C++ and returns the mean ns per call (for the perf report).
PyObject* guardSetBench(PyObject* self, PyObject* args, PyObject* kwargs) {
  DYNAMO_PY_TRY
  FrameValues f;
  PyRef holder;
  Py_ssize_t n = 0;
  if (!parseFrame(args, kwargs, f, holder, &n)) return nullptr;
  const core::GuardSet& set = unwrapSet(self);
  Py_ssize_t passed = 0;
  auto start = std::chrono::steady_clock::now();
  for (Py_ssize_t i = 0; i < n; ++i) passed += set.check(f) ? 1 : 0;
  auto stop = std::chrono::steady_clock::now();
  double ns = std::chrono::duration<double, std::nano>(stop - start).count();
  return Py_BuildValue("(dn)", n > 0 ? ns / static_cast<double>(n) : 0.0, passed);  // new ref
  DYNAMO_PY_CATCH(nullptr)
}

Py_ssize_t guardSetLen(PyObject* self) {
  return static_cast<Py_ssize_t>(unwrapSet(self).size());
}

PyMethodDef guardSetMethods[] = {
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guardSetCheck)),
     METH_VARARGS | METH_KEYWORDS, "check(locals, globals, builtins=None) -> bool"},
    {"check_via_accessor",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guardSetCheckViaAccessor)),
     METH_VARARGS | METH_KEYWORDS, "check() reading slots through FrameValues::localAt."},
    {"failures", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guardSetFailures)),
     METH_VARARGS | METH_KEYWORDS, "failures(locals, globals, builtins=None) -> [dict]"},
    {"guards", guardSetGuards, METH_NOARGS, "Every guard as a dict, in check order."},
    {"describe", guardSetDescribe, METH_NOARGS, "Every guard, one per line."},
    {"bench", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guardSetBench)),
     METH_VARARGS | METH_KEYWORDS,
     "bench(locals, globals, n, builtins=None) -> (ns per check, checks passed)"},
    {nullptr, nullptr, 0, nullptr}};

// ---- module functions -------------------------------------------------------------------------

PyObject* fnLocal(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  int slot = 0;
  const char* name = nullptr;
  if (!PyArg_ParseTuple(args, "is", &slot, &name)) return nullptr;
  return wrapSource(Source::local(slot, name));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* fnGlobal(PyObject*, PyObject* arg) {
  DYNAMO_PY_TRY
  return wrapSource(Source::global(toString(arg)));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* fnBuiltin(PyObject*, PyObject* arg) {
  DYNAMO_PY_TRY
  return wrapSource(Source::builtin(toString(arg)));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* fnGuardKinds(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  for (const core::GuardKindInfo& k : core::guardKinds()) {
    PyRef row = PyRef::steal(checkPy(Py_BuildValue("(sis)", k.name, k.cost, k.description)));
    if (PyList_Append(list.get(), row.get()) < 0) return nullptr;
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* fnModuleAttrPlan(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  PyObject* module = nullptr;  // borrowed ref
  const char* name = nullptr;
  if (!PyArg_ParseTuple(args, "Os", &module, &name)) return nullptr;
  core::ModuleAttrPlan plan = core::planModuleAttr(module, name);
  return Py_BuildValue("(Nss)", PyBool_FromLong(plan.safe), core::moduleSlotName(plan.foundIn),
                       plan.whyNot.c_str());  // new ref
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef moduleFunctions[] = {
    {"local", fnLocal, METH_VARARGS, "local(slot, name): a frame slot as a Source."},
    {"global_", fnGlobal, METH_O, "global_(name): a global variable as a Source."},
    {"builtin", fnBuiltin, METH_O, "builtin(name): a builtin as a Source."},
    {"guard_kinds", fnGuardKinds, METH_NOARGS, "[(name, cost, description)] from guard_kinds.def."},
    {"module_attr_plan", fnModuleAttrPlan, METH_VARARGS,
     "module_attr_plan(module, name) -> (safe, found_in, why_not)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef guardsModuleDef = {PyModuleDef_HEAD_INIT, "_dynamo_testing.guards",
                               "Sources and guards (test API).", -1, moduleFunctions,
                               nullptr, nullptr, nullptr, nullptr};

// PyType_Slot wants void*; function pointers go through this cast.
template <typename F>
void* slot(F f) {
  return reinterpret_cast<void*>(f);
}

PyType_Slot sourceSlots[] = {
    {Py_tp_doc, const_cast<char*>("How to reach a value from a frame (immutable).")},
    {Py_tp_dealloc, slot(sourceDealloc)},
    {Py_tp_repr, slot(sourceRepr)},
    {Py_tp_hash, slot(sourceHash)},
    {Py_tp_richcompare, slot(sourceCompare)},
    {Py_tp_methods, sourceMethods},
    {Py_tp_getset, sourceGetSet},
    {0, nullptr}};
PyType_Spec sourceSpec = {"_dynamo_testing.guards.Source", sizeof(PySource), 0, Py_TPFLAGS_DEFAULT,
                          sourceSlots};

PyType_Slot builderSlots[] = {
    {Py_tp_doc, const_cast<char*>("Collects guards (deduplicated); build() makes the GuardSet.")},
    {Py_tp_new, slot(builderNew)},
    {Py_tp_dealloc, slot(builderDealloc)},
    {Py_tp_methods, builderMethods},
    {Py_sq_length, slot(builderLen)},
    {0, nullptr}};
PyType_Spec builderSpec = {"_dynamo_testing.guards.GuardSetBuilder", sizeof(PyBuilder), 0,
                           Py_TPFLAGS_DEFAULT, builderSlots};

PyType_Slot guardSetSlots[] = {
    {Py_tp_doc, const_cast<char*>("The guards of one compiled entry, grouped by source.")},
    {Py_tp_dealloc, slot(guardSetDealloc)},
    {Py_tp_methods, guardSetMethods},
    {Py_sq_length, slot(guardSetLen)},
    {0, nullptr}};
PyType_Spec guardSetSpec = {"_dynamo_testing.guards.GuardSet", sizeof(PyGuardSet), 0,
                            Py_TPFLAGS_DEFAULT, guardSetSlots};

// Creates the type from `spec` and adds it to module; returns it (borrowed ref) or NULL.
PyTypeObject* addType(PyObject* module, const char* name, PyType_Spec* spec) {
  PyObject* type = PyType_FromSpec(spec);  // new ref
  if (type == nullptr) return nullptr;
  if (PyModule_AddObject(module, name, type) < 0) {  // steals type on success
    Py_DECREF(type);
    return nullptr;
  }
  return reinterpret_cast<PyTypeObject*>(type);  // borrowed ref: the module owns it
}

}  // namespace

int initGuardBindings(PyObject* module) {
  PyRef sub = PyRef::steal(PyModule_Create(&guardsModuleDef));
  if (!sub) return -1;
  sourceType = addType(sub.get(), "Source", &sourceSpec);
  builderType = addType(sub.get(), "GuardSetBuilder", &builderSpec);
  guardSetType = addType(sub.get(), "GuardSet", &guardSetSpec);
  if (!sourceType || !builderType || !guardSetType) return -1;
  // `import _dynamo_testing.guards` finds it in sys.modules; `from _dynamo_testing import guards` too.
  PyObject* modules = PyImport_GetModuleDict();  // borrowed ref
  if (PyDict_SetItemString(modules, "_dynamo_testing.guards", sub.get()) < 0) return -1;
  if (PyModule_AddObject(module, "guards", sub.get()) < 0) return -1;  // steals on success
  sub.release();
  return 0;
}

}  // namespace dynamo::py
