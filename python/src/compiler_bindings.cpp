// dynamo._C._compiler: the frame compiler for the Python package (dynamo.optimize/compile).
//
//   make(backend_name, backend_or_None, fullgraph, cache_size_limit, suppress_errors, listener,
//        skip_file_prefixes, [only_function, force_codes, no_inline_prefixes, disabled_passes,
//        dynamic, automatic_dynamic, pass_limits, corrupt_node])
//       -> Compiler handle  (pass_limits: ((pass, N), ...) of DYNAMO_BISECT_PASS; corrupt_node:
//          DYNAMO_TEST_CORRUPT_NODE, tests only)
//   set_mode("off" | "run_only" | "compile", handle_or_None) -> previous (mode, handle)
//   reset()                  drop every compiled entry
//   disable_code(code)       never capture this code object
//   break_kinds()            [(slug, explanation, hint)] from break_kinds.def
//
// The listener receives one dict per compile attempt (see recordToDict); the trace store gets
// the same records in C++ (recording_bindings.cpp).
#include <memory>

#include "bindings.h"
// structmember.h needs Python.h first (bindings.h includes it).
#include <structmember.h>
#include "dynamo/backends/registry.h"
#include "dynamo/core/compile_sink.h"
#include "dynamo/core/compiler.h"
#include "dynamo/core/frame_hook.h"
#include "dynamo/core/graph_fx.h"
#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_serializer.h"
#include "py_util.h"
#include "recording_bindings.h"

namespace dynamo::py {

namespace {

struct CompilerHandle {
  PyObject_HEAD
  std::shared_ptr<core::FrameCompiler>* compiler;
};

void handleDealloc(PyObject* self) {
  delete reinterpret_cast<CompilerHandle*>(self)->compiler;
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject handleType = [] {
  PyTypeObject t{};
  t.ob_base = PyVarObject_HEAD_INIT(nullptr, 0) t.tp_name = "dynamo._C._compiler.Compiler";
  t.tp_basicsize = sizeof(CompilerHandle);
  t.tp_dealloc = handleDealloc;
  t.tp_flags = Py_TPFLAGS_DEFAULT;
  t.tp_doc = "A configured frame compiler (internal handle).";
  return t;
}();

// Whether a Python listener wants the listings of each compile (set_listener_listings): the
// printed and serialized graphs, pass graphs, guard text and bytecode listing. GIL held.
bool listenerListings = false;

// The handle currently installed on each thread's hook, to report it back from set_mode.
thread_local PyObject* currentHandle = nullptr;  // strong ref

// ---- torch.compile's frame hook beside ours ----------------------------------------------------
//
// Both capture frames through the interpreter's one PEP 523 slot. Under torch.compile (its
// callback set on this thread), a dynamo-compiled call would run our transformed code through
// torch's hook, which captures it again (and fails on our graph objects): refused with a UserError
// naming the user's call. The other nesting (a torch.compile'd function called from code Dynamo
// runs) needs nothing: torch's hook goes over ours and our hook leaves the frames it hands on alone.

// sys.modules[name] (new ref), or NULL (no error set) when it is not imported.
PyObject* importedModule(const char* name) {
  PyRef key = PyRef::steal(PyUnicode_FromString(name));
  PyObject* m = key ? PyImport_GetModule(key.get()) : nullptr;
  if (m == nullptr) PyErr_Clear();
  return m;
}

// True when torch._dynamo's eval-frame callback is set on this thread. Cheap unless another
// hook is installed at all.
bool torchHookActive() {
  if (!core::foreignHookInstalled()) return false;
  PyObject* torch = importedModule("torch");  // new ref or NULL
  if (torch == nullptr) return false;
  PyRef mod = PyRef::steal(torch);
  PyRef get;
  for (const char* step : {"_C", "_dynamo", "eval_frame", "get_eval_frame_callback"}) {
    PyRef next = PyRef::steal(PyObject_GetAttrString(get ? get.get() : mod.get(), step));
    if (!next) {
      PyErr_Clear();
      return false;  // torch 1.x: no torch._dynamo
    }
    get = next;
  }
  PyRef callback = PyRef::steal(PyObject_CallNoArgs(get.get()));
  if (!callback) {
    PyErr_Clear();
    return false;
  }
  return callback.get() != Py_None;
}

// The innermost frame of the user's (frames of the dynamo package skipped): where the call came from.
SourceLocation userCallSite() {
  static std::string packageDir = [] {
    PyRef dyn = PyRef::steal(importedModule("dynamo"));
    PyRef file = dyn ? PyRef::steal(PyObject_GetAttrString(dyn.get(), "__file__")) : PyRef{};
    PyErr_Clear();
    std::string f = file && PyUnicode_Check(file.get()) ? PyUnicode_AsUTF8(file.get()) : "";
    size_t slash = f.rfind('/');
    return slash == std::string::npos ? std::string() : f.substr(0, slash + 1);
  }();
  SourceLocation loc;
  PyFrameObject* f = PyEval_GetFrame();  // borrowed ref
  PyRef hold;
  while (f != nullptr) {
    PyRef code = PyRef::steal(reinterpret_cast<PyObject*>(PyFrame_GetCode(f)));
    const char* file = PyUnicode_AsUTF8(reinterpret_cast<PyCodeObject*>(code.get())->co_filename);
    if (file == nullptr) {
      PyErr_Clear();
      break;
    }
    if (packageDir.empty() || std::string(file).rfind(packageDir, 0) != 0) {
      loc.file = file;
      loc.line = PyFrame_GetLineNumber(f);
      break;
    }
    hold = PyRef::steal(reinterpret_cast<PyObject*>(PyFrame_GetBack(f)));  // new ref
    f = reinterpret_cast<PyFrameObject*>(hold.get());
  }
  if (loc.line > 0) {
    PyRef linecache = PyRef::steal(PyImport_ImportModule("linecache"));
    PyRef text = linecache ? PyRef::steal(PyObject_CallMethod(linecache.get(), "getline", "si",
                                                                          loc.file.c_str(), loc.line))
                                 : PyRef{};
    if (text && PyUnicode_Check(text.get())) {
      std::string s = PyUnicode_AsUTF8(text.get());
      size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r\n");
      if (b != std::string::npos) loc.sourceLine = s.substr(b, e - b + 1);
    }
    PyErr_Clear();
  }
  return loc;
}

// Throws the UserError when torch.compile's hook is active on this thread. `what`: what the user
// asked of Dynamo ("a call of a dynamo-compiled function", "`with dynamo.optimize(...)`").
void refuseUnderTorchCompile(const std::string& what) {
  if (!torchHookActive()) return;
  throw UserError(UserErrorKind::kInvalidArgument,
                  what + " under torch.compile: both would capture the same frames",
                  userCallSite(),
                  "torch._dynamo's frame hook (PEP 523) is active on this thread (the code runs inside a "
                  "torch.compile'd function or torch._dynamo.optimize), and the interpreter has one hook: "
                  "torch would capture Dynamo's compiled code again",
                  "use one compiler for this code: call the dynamo-compiled function outside the "
                  "torch.compile'd one, or wrap it with torch.compiler.disable(...) so that torch.compile "
                  "leaves it to Dynamo");
}

PyObject* locationToDict(const SourceLocation& loc) {
  PyObject* d = checkPy(PyDict_New());
  setItem(d, "file", newStr(loc.file));
  setItem(d, "line", PyLong_FromLong(loc.line));
  setItem(d, "source", newStr(loc.sourceLine));
  return d;
}

PyObject* stackToList(const std::vector<SourceLocation>& stack) {
  PyObject* l = checkPy(PyList_New(0));
  for (const SourceLocation& s : stack) {
    PyObject* d = locationToDict(s);
    appendItem(l, d);
  }
  return l;
}

PyObject* recordToDict(const core::CompileRecord& r) {
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "function", newStr(r.function));
  setItem(d.get(), "file", newStr(r.where.file));
  setItem(d.get(), "line", PyLong_FromLong(r.where.line));
  setItem(d.get(), "attempt", PyLong_FromLong(r.attempt));
  setItem(d.get(), "status", newStr(compileStatusListenerName(r.status)));
  setItem(d.get(), "store_status", newStr(compileStatusName(r.status)));
  setItem(d.get(), "reason", newStr(r.reason));
  PyObject* graphs = checkPy(PyList_New(0));
  for (size_t i = 0; i < r.graphs.size(); ++i) {
    const core::Graph& g = r.graphs[i];
    PyObject* gd = checkPy(PyDict_New());
    // "" when no one asked for the listings (add_compile_listener(fn, listings=False)).
    setItem(gd, "text", newStr(i < r.printedGraphs.size() ? r.printedGraphs[i] : std::string()));
    setItem(gd, "json", newStr(i < r.serializedGraphs.size() ? r.serializedGraphs[i] : std::string()));
    PyObject* ops = checkPy(PyDict_New());
    for (const auto& [k, v] : g.opCounts()) {
      setItem(ops, k.c_str(), PyLong_FromLong(v));
    }
    setItem(gd, "op_counts", ops);
    setItem(gd, "num_inputs", PyLong_FromSize_t(g.inputs().size()));
    setItem(gd, "num_nodes", PyLong_FromSize_t(g.body().size()));
    appendItem(graphs, gd);
  }
  setItem(d.get(), "graphs", graphs);
  PyObject* breaks = checkPy(PyList_New(0));
  for (const core::BreakRecord& b : r.breaks) {
    PyObject* bd = checkPy(PyDict_New());
    setItem(bd, "kind", newStr(b.kind));
    setItem(bd, "detail", newStr(b.detail));
    setItem(bd, "explanation", newStr(b.explanation));
    setItem(bd, "hint", newStr(b.hint));
    setItem(bd, "file", newStr(b.where.file));
    setItem(bd, "line", PyLong_FromLong(b.where.line));
    setItem(bd, "source", newStr(b.where.sourceLine));
    setItem(bd, "user_stack", stackToList(b.userStack));
    appendItem(breaks, bd);
  }
  setItem(d.get(), "breaks", breaks);
  PyObject* passes = checkPy(PyList_New(0));
  for (const core::PassRecord& p : r.passes) {
    PyObject* pd = checkPy(PyDict_New());
    setItem(pd, "name", newStr(p.name));
    setItem(pd, "status", newStr(p.status));
    setItem(pd, "nodes_before", PyLong_FromSize_t(p.nodesBefore));
    setItem(pd, "nodes_after", PyLong_FromSize_t(p.nodesAfter));
    setItem(pd, "graph", newStr(p.graphText));
    PyObject* apps = checkPy(PyList_New(0));
    for (const core::PassApplication& a : p.applications) {
      PyObject* ad = checkPy(PyDict_New());
      setItem(ad, "index", PyLong_FromLongLong(a.index));
      setItem(ad, "node", newStr(a.node));
      setItem(ad, "op", newStr(a.op));
      setItem(ad, "where", newStr(a.where.str()));
      setItem(ad, "source", newStr(a.where.sourceLine));
      setItem(ad, "applied", PyBool_FromLong(a.applied));
      appendItem(apps, ad);
    }
    setItem(pd, "applications", apps);
    appendItem(passes, pd);
  }
  setItem(d.get(), "passes", passes);
  PyObject* guards = checkPy(PyList_New(0));
  for (const core::GuardInfo& g : r.guards) {
    PyObject* gd = checkPy(PyDict_New());
    setItem(gd, "kind", newStr(g.kindName));
    setItem(gd, "source", newStr(g.sourceName));
    setItem(gd, "checked", newStr(g.checked));
    setItem(gd, "file", newStr(g.where.file));
    setItem(gd, "line", PyLong_FromLong(g.where.line));
    setItem(gd, "user_source", newStr(g.where.sourceLine));
    appendItem(guards, gd);
  }
  setItem(d.get(), "guards", guards);
  PyObject* misses = checkPy(PyList_New(0));
  for (const core::EntryMiss& m : r.misses) {
    PyObject* md = checkPy(PyDict_New());
    setItem(md, "entry_id", PyLong_FromUnsignedLongLong(m.entryId));
    PyObject* failures = checkPy(PyList_New(0));
    for (const core::GuardFailure& f : m.failures) {
      PyObject* fd = checkPy(PyDict_New());
      setItem(fd, "kind", newStr(core::guardKindInfo(f.kind).name));
      setItem(fd, "source", newStr(f.sourceName));
      setItem(fd, "reason", newStr(f.reason));
      setItem(fd, "property", newStr(f.property));
      setItem(fd, "dim", PyLong_FromLong(f.dim));
      setItem(fd, "expected", newStr(f.expected));
      setItem(fd, "seen", newStr(f.seen));
      setItem(fd, "created_at", f.where.known() ? locationToDict(f.where) : (Py_INCREF(Py_None), Py_None));
      appendItem(failures, fd);
    }
    setItem(md, "failures", failures);
    appendItem(misses, md);
  }
  setItem(d.get(), "misses", misses);
  setItem(d.get(), "listings", PyBool_FromLong(r.hasListings));
  setItem(d.get(), "guard_text", newStr(r.guardText));
  setItem(d.get(), "dynamic_shapes", newStr(r.dynamicShapes));
  setItem(d.get(), "bytecode", newStr(r.bytecode));
  setItem(d.get(), "entry_id", PyLong_FromUnsignedLongLong(r.entryId));
  setItem(d.get(), "capture_ms", PyFloat_FromDouble(r.captureMs));
  setItem(d.get(), "guard_ms", PyFloat_FromDouble(r.guardMs));
  setItem(d.get(), "backend_ms", PyFloat_FromDouble(r.backendMs));
  setItem(d.get(), "total_ms", PyFloat_FromDouble(r.totalMs));
  return d.release();
}

PyObject* makeCompiler(PyObject*, PyObject* args) {
  const char* backendName;
  PyObject* backend;
  int fullgraph, suppress;
  int cacheLimit;
  PyObject* listener;
  PyObject* skipPrefixes;
  const char* onlyFunction = "";
  PyObject* forceCodes = nullptr;
  PyObject* noInlinePrefixes = nullptr;
  PyObject* disabledPasses = nullptr;
  int dynamic = -1, automaticDynamic = 1;
  PyObject* passLimits = nullptr;
  const char* corruptNode = "";
  if (!PyArg_ParseTuple(args, "sOpipOO|sOOOipOs", &backendName, &backend, &fullgraph, &cacheLimit, &suppress, &listener,
                        &skipPrefixes, &onlyFunction, &forceCodes, &noInlinePrefixes, &disabledPasses, &dynamic,
                        &automaticDynamic, &passLimits, &corruptNode))
    return nullptr;
  DYNAMO_PY_TRY
  core::CompilerOptions o;
  o.onlyFunction = onlyFunction;
  if (forceCodes != nullptr && forceCodes != Py_None) {
    PyRef codes = PyRef::steal(checkPy(PySequence_Fast(forceCodes, "force_codes must be a sequence of code objects")));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(codes.get()); ++i)
      o.forceCodes.push_back(core::PyObjectRef::borrow(PySequence_Fast_GET_ITEM(codes.get(), i)));
  }
  PyRef seq = PyRef::steal(checkPy(PySequence_Fast(skipPrefixes, "skip_file_prefixes must be a sequence of str")));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.get()); ++i)
    o.skipFilePrefixes.push_back(toString(PySequence_Fast_GET_ITEM(seq.get(), i)));
  if (noInlinePrefixes != nullptr && noInlinePrefixes != Py_None) {
    PyRef libs = PyRef::steal(checkPy(PySequence_Fast(noInlinePrefixes, "no_inline_prefixes must be a sequence of str")));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(libs.get()); ++i)
      o.noInlineFilePrefixes.push_back(toString(PySequence_Fast_GET_ITEM(libs.get(), i)));
  }
  if (disabledPasses != nullptr && disabledPasses != Py_None) {
    PyRef names = PyRef::steal(checkPy(PySequence_Fast(disabledPasses, "disabled_passes must be a sequence of str")));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(names.get()); ++i)
      o.passOptions.disabled.push_back(toString(PySequence_Fast_GET_ITEM(names.get(), i)));
  }
  if (passLimits != nullptr && passLimits != Py_None) {
    PyRef limits = PyRef::steal(checkPy(PySequence_Fast(passLimits, "pass_limits must be a sequence of (name, n)")));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(limits.get()); ++i) {
      const char* name = nullptr;
      long long n = 0;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(limits.get(), i), "sL", &name, &n)) return nullptr;
      o.passOptions.limits.emplace_back(name, n);
    }
  }
  o.passOptions.corruptNode = corruptNode;
  // Applications are numbered over the whole process (DYNAMO_BISECT_PASS=name:N counts them so).
  static const auto kProcessCounters = std::make_shared<core::PassCounters>();
  o.passOptions.counters = kProcessCounters;
  o.backendName = backendName;
  o.backend = backend != Py_None ? backends::makeCallableBackend(backend, backendName) : backends::makeBackend(backendName);
  if (!o.backend)
    throw UserError(UserErrorKind::kInvalidArgument, std::string("unknown backend '") + backendName + "'");
  o.fullgraph = fullgraph;
  o.dynamic = dynamic;
  o.automaticDynamic = automaticDynamic != 0;
  // The eager runner and callable backends (handed the FX graph) run a graph for any sizes; the
  // aot backends trace it with the example sizes.
  o.backendHandlesDynamic = backend != Py_None || std::string(backendName) == "eager";
  // The AOT backends compile once per distinct input size inside a dynamic entry; "fused" lowers
  // the graph per size, its kernels taking the sizes as parameters (one C++ compile serves many).
  o.backendPerSize = backend == Py_None && (std::string(backendName).rfind("aot_eager", 0) == 0 ||
                                            std::string(backendName) == "fused");
  o.cacheSizeLimit = cacheLimit;
  o.suppressErrors = suppress;
  if (listener != Py_None) {
    o.listenerWantsListings = [] { return listenerListings; };
    core::PyObjectRef cb = core::PyObjectRef::borrow(listener);
    o.listener = [cb](const core::CompileRecord& r) {
      PyObject* d = nullptr;
      try {
        d = recordToDict(r);
      } catch (...) {
        PyErr_Clear();
        return;
      }
      PyObject* res = PyObject_CallOneArg(cb.get(), d);  // new ref
      Py_DECREF(d);
      if (res == nullptr) {
        PyErr_WriteUnraisable(cb.get());
      }
      Py_XDECREF(res);
    };
  }
  if (PyType_Ready(&handleType) < 0) return nullptr;
  auto* h = PyObject_New(CompilerHandle, &handleType);
  if (h == nullptr) return nullptr;
  h->compiler = new std::shared_ptr<core::FrameCompiler>(core::makeFrameCompiler(std::move(o)));
  return reinterpret_cast<PyObject*>(h);
  DYNAMO_PY_CATCH(nullptr)
}

const char* modeName(core::HookMode m) {
  switch (m) {
    case core::HookMode::kOff: return "off";
    case core::HookMode::kRunOnly: return "run_only";
    case core::HookMode::kCompile: return "compile";
  }
  return "off";
}

PyObject* setMode(PyObject*, PyObject* args) {
  const char* mode;
  PyObject* handle;
  if (!PyArg_ParseTuple(args, "sO", &mode, &handle)) return nullptr;
  DYNAMO_PY_TRY
  std::string m = mode;
  PyObject* previous = Py_BuildValue("(sO)", modeName(core::hookMode()), currentHandle ? currentHandle : Py_None);
  if (previous == nullptr) return nullptr;
  std::shared_ptr<core::FrameCompiler> compiler;
  if (handle != Py_None) {
    if (Py_TYPE(handle) != &handleType) {
      Py_DECREF(previous);
      PyErr_SetString(PyExc_TypeError, "set_mode: expected a compiler handle or None");
      return nullptr;
    }
    compiler = *reinterpret_cast<CompilerHandle*>(handle)->compiler;
  }
  core::HookMode hm;
  if (m == "off") hm = core::HookMode::kOff;
  else if (m == "run_only") hm = core::HookMode::kRunOnly;
  else if (m == "compile") hm = core::HookMode::kCompile;
  else {
    Py_DECREF(previous);
    PyErr_Format(PyExc_ValueError, "set_mode: unknown mode '%s' (use 'off', 'run_only' or 'compile')", mode);
    return nullptr;
  }
  if (hm != core::HookMode::kOff) {
    try {
      refuseUnderTorchCompile("`with dynamo.optimize(...)` (or dynamo.run)");
    } catch (...) {
      Py_DECREF(previous);
      throw;
    }
  }
  core::setHookMode(hm, compiler);
  Py_XINCREF(handle == Py_None ? nullptr : handle);
  Py_XDECREF(currentHandle);
  currentHandle = handle == Py_None ? nullptr : handle;
  return previous;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* resetAll(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  core::resetFrameCaches();
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* disableCode(PyObject*, PyObject* code) {
  if (!PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "disable_code: expected a code object");
    return nullptr;
  }
  DYNAMO_PY_TRY
  core::disableCode(code);
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

// The cache entries of a code object, most recently hit first: [{id, hits, code}] (a debug
// reader of the hook's state: tests and bench/overhead.py count hits and call the graph).
PyObject* cacheEntries(PyObject*, PyObject* code) {
  if (!PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "cache_entries: expected a code object");
    return nullptr;
  }
  DYNAMO_PY_TRY
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  core::CodeState* state = core::CodeState::find(code);
  if (state == nullptr) return list.release();
  for (const auto& entry : state->entries()) {
    PyRef dict = PyRef::steal(checkPy(PyDict_New()));
    setItem(dict.get(), "id", PyLong_FromUnsignedLongLong(entry->id));
    setItem(dict.get(), "hits", PyLong_FromUnsignedLongLong(entry->hits));
    setItem(dict.get(), "code", Py_NewRef(entry->code));
    if (PyList_Append(list.get(), dict.get()) < 0) throw PythonError{};
  }
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* setListenerListings(PyObject*, PyObject* flag) {
  int on = PyObject_IsTrue(flag);
  if (on < 0) return nullptr;
  bool previous = listenerListings;
  listenerListings = on != 0;
  return PyBool_FromLong(previous);
}

PyObject* backendList(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  PyObject* out = checkPy(PyList_New(0));
  for (const backends::BackendInfo& b : backends::backendList()) {
    PyObject* row = checkPy(Py_BuildValue("(ss)", b.name, b.description));
    appendItem(out, row);
  }
  return out;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* passList(PyObject*, PyObject* args) {
  int withTests = 0;
  if (!PyArg_ParseTuple(args, "|p", &withTests)) return nullptr;
  DYNAMO_PY_TRY
  PyObject* out = checkPy(PyList_New(0));
  for (const core::PassInfo& p : core::passList()) {
    if (p.testOnly && !withTests) continue;
    PyObject* row = checkPy(Py_BuildValue("(ss)", p.name, p.description));
    appendItem(out, row);
  }
  return out;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* breakKinds(PyObject*, PyObject*) {
  PyObject* l = PyList_New(0);
  if (l == nullptr) return nullptr;
  for (const core::BreakKindRow& r : core::breakKinds()) {
    PyObject* t = Py_BuildValue("(sss)", r.slug, r.explanation, r.hint);
    if (t == nullptr) {
      Py_DECREF(l);
      return nullptr;
    }
    appendItem(l, t);
  }
  return l;
}

// ---- CompiledFunction: the wrapper dynamo.compile returns for a function ---------------------
//
// Calling it sets the thread's hook mode (and compiler) for the duration of the call and restores
// the previous ones: the same as `with dynamo.optimize(...): fn(*args)`, without a Python frame
// or a context-manager protocol on the hot path.

struct CompiledFunction {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fn;        // strong ref: the user's callable
  PyObject* handle;    // strong ref: the compiler handle, or NULL (run-only / off)
  core::HookMode mode;
  int modeNumber;      // mode as an int, exposed as _dynamo_mode (0 off, 1 run-only, 2 compile)
  PyObject* dict;      // attributes copied by functools.update_wrapper
};

PyObject* compiledFunctionCall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* o = reinterpret_cast<CompiledFunction*>(self);
  core::HookMode prevMode = core::hookMode();
  std::shared_ptr<core::FrameCompiler> prevCompiler = core::hookCompiler();
  PyObject* prevHandle = currentHandle;  // the thread's reference moves to this frame
  try {
    if (o->mode != core::HookMode::kOff) refuseUnderTorchCompile("a call of a dynamo-compiled function");
    core::setHookMode(o->mode, o->handle ? *reinterpret_cast<CompilerHandle*>(o->handle)->compiler : nullptr);
  } catch (...) {
    translateException();
    return nullptr;
  }
  Py_XINCREF(o->handle);
  currentHandle = o->handle;
  PyObject* result = PyObject_Vectorcall(o->fn, args, nargsf, kwnames);  // new ref
  Py_XDECREF(currentHandle);
  currentHandle = prevHandle;
  try {
    core::setHookMode(prevMode, prevCompiler);
  } catch (...) {
    Py_XDECREF(result);
    translateException();
    return nullptr;
  }
  return result;
}

int compiledFunctionTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* o = reinterpret_cast<CompiledFunction*>(self);
  Py_VISIT(o->fn);
  Py_VISIT(o->handle);
  Py_VISIT(o->dict);
  return 0;
}

int compiledFunctionClear(PyObject* self) {
  auto* o = reinterpret_cast<CompiledFunction*>(self);
  Py_CLEAR(o->fn);
  Py_CLEAR(o->handle);
  Py_CLEAR(o->dict);
  return 0;
}

void compiledFunctionDealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  compiledFunctionClear(self);
  Py_TYPE(self)->tp_free(self);
}

// Binding as a method, so decorated methods receive self.
PyObject* compiledFunctionGet(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyObject* compiledFunctionRepr(PyObject* self) {
  return PyUnicode_FromFormat("<dynamo compiled %R>", reinterpret_cast<CompiledFunction*>(self)->fn);
}

PyMemberDef compiledFunctionMembers[] = {
    {"_dynamo_orig", T_OBJECT, offsetof(CompiledFunction, fn), READONLY, "the original callable"},
    {"_dynamo_mode", T_INT, offsetof(CompiledFunction, modeNumber), READONLY,
     "0: runs without capture (dynamo.disable), 1: run-only, 2: compile"},
    {nullptr, 0, 0, 0, nullptr},
};

PyGetSetDef compiledFunctionGetSet[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject compiledFunctionType = [] {
  PyTypeObject t{};
  t.ob_base = PyVarObject_HEAD_INIT(nullptr, 0) t.tp_name = "dynamo.CompiledFunction";
  t.tp_basicsize = sizeof(CompiledFunction);
  t.tp_dealloc = compiledFunctionDealloc;
  t.tp_vectorcall_offset = offsetof(CompiledFunction, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_repr = compiledFunctionRepr;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR;
  t.tp_traverse = compiledFunctionTraverse;
  t.tp_clear = compiledFunctionClear;
  t.tp_descr_get = compiledFunctionGet;
  t.tp_dictoffset = offsetof(CompiledFunction, dict);
  t.tp_members = compiledFunctionMembers;
  t.tp_getset = compiledFunctionGetSet;
  t.tp_doc = "A function compiled by dynamo: calls run with the hook in the wrapper's mode.";
  return t;
}();

PyObject* wrapFunction(PyObject*, PyObject* args) {
  PyObject* fn;
  const char* mode;
  PyObject* handle;
  if (!PyArg_ParseTuple(args, "OsO", &fn, &mode, &handle)) return nullptr;
  std::string m = mode;
  core::HookMode hm = m == "compile" ? core::HookMode::kCompile
                      : m == "run_only" ? core::HookMode::kRunOnly : core::HookMode::kOff;
  if (hm == core::HookMode::kCompile && Py_TYPE(handle) != &handleType) {
    PyErr_SetString(PyExc_TypeError, "wrap: compile mode needs a compiler handle");
    return nullptr;
  }
  if (PyType_Ready(&compiledFunctionType) < 0) return nullptr;
  auto* o = PyObject_GC_New(CompiledFunction, &compiledFunctionType);
  if (o == nullptr) return nullptr;
  o->vectorcall = compiledFunctionCall;
  Py_INCREF(fn);
  o->fn = fn;
  o->handle = handle == Py_None ? nullptr : handle;
  Py_XINCREF(o->handle);
  o->mode = hm;
  o->modeNumber = hm == core::HookMode::kCompile ? 2 : hm == core::HookMode::kRunOnly ? 1 : 0;
  o->dict = nullptr;
  PyObject_GC_Track(o);
  return reinterpret_cast<PyObject*>(o);
}

// The graph of the compile in progress as captured, before the passes (a GraphModule), or None
// outside a backend's compile: the accuracy reference of dynamo-minify's probe.
PyObject* capturedGraph(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  const core::Graph* g = core::capturedGraphOfCurrentCompile();
  if (g == nullptr) Py_RETURN_NONE;
  return core::toFxGraphModule(*g).release();
  DYNAMO_PY_CATCH(nullptr)
}

// collect_late_kernels(entry_id, fn): fn() (the compile of a graph the entry `entry_id` makes
// after it was made: an AOT compile's backward graph), with its backend's kernels handed to the
// trace store's sink as late rows of the compile that made the entry. Only when the sink records
// that entry; otherwise just fn().
PyObject* collectLateKernels(PyObject*, PyObject* args) {
  DYNAMO_PY_TRY
  unsigned long long entryId = 0;
  PyObject* fn = nullptr;
  if (!PyArg_ParseTuple(args, "KO:collect_late_kernels", &entryId, &fn)) return nullptr;
  const std::shared_ptr<core::CompileSink>& sink = core::compileSink();
  if (entryId == 0 || !sink || !sink->wantsLateKernels(entryId)) return PyObject_CallNoArgs(fn);
  std::vector<core::BackendKernel> kernels;
  PyObject* out = nullptr;
  {
    core::BackendKernelCollector collect(&kernels);
    out = PyObject_CallNoArgs(fn);
  }
  if (out != nullptr) {
    // The sink is asked again: the call may have closed the run.
    if (const auto& now = core::compileSink()) now->lateKernels(entryId, kernels);
  }
  return out;
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef methods[] = {
    {"wrap", wrapFunction, METH_VARARGS, "wrap(fn, mode, handle) -> a callable running fn with the hook in `mode`."},
    {"make", makeCompiler, METH_VARARGS, "make(backend_name, backend, fullgraph, cache_size_limit, suppress_errors, listener, skip_file_prefixes, ..., dynamic, automatic_dynamic)"},
    {"set_mode", setMode, METH_VARARGS, "set_mode(mode, handle) -> (previous_mode, previous_handle)"},
    {"reset", resetAll, METH_NOARGS, "Drop every compiled entry."},
    {"disable_code", disableCode, METH_O, "Never capture this code object."},
    {"set_listener_listings", setListenerListings, METH_O,
     "set_listener_listings(bool) -> previous: whether the compile listener needs each record's "
     "listings (graph text and JSON, pass graphs, guard text, bytecode)."},
    {"cache_entries", cacheEntries, METH_O,
     "cache_entries(code) -> [{id, hits, code}]: its cache entries, most recently hit first."},
    {"break_kinds", breakKinds, METH_NOARGS, "[(slug, explanation, hint)] of every graph-break kind."},
    {"backend_list", backendList, METH_NOARGS, "[(name, description)] of the C++ backends of backends.def."},
    {"captured_graph", capturedGraph, METH_NOARGS,
     "captured_graph() -> the graph of the compile in progress before the pass pipeline (a GraphModule), "
     "or None outside a backend's compile"},
    {"collect_late_kernels", collectLateKernels, METH_VARARGS,
     "collect_late_kernels(entry_id, fn) -> fn(), recording the kernels its backend compiles as late "
     "rows of the compile that made the entry (the trace store; docs/trace-store.md, \"Kernels\")"},
    {"pass_list", passList, METH_VARARGS,
     "pass_list(with_tests=False) -> [(name, description)] of the passes of passes.def, in pipeline order "
     "(with_tests: also the test-only passes)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef moduleDef = {PyModuleDef_HEAD_INIT, "dynamo._C._compiler", "The frame compiler.", -1, methods,
                         nullptr, nullptr, nullptr, nullptr};

}  // namespace

int initCompilerBindings(PyObject* module) {
  core::setCompiledFunctionType(&compiledFunctionType);
  // C++ exceptions thrown inside the frame hook become Python exceptions.
  core::setErrorTranslator(translateException);
  if (core::registerCompilerTypes(module) < 0) return -1;
  return addSubmodule(module, "_compiler", PyModule_Create(&moduleDef));
}

}  // namespace dynamo::py
