// dynamo._C._codegen: the fused code generator for tests, benchmarks and tools.
//
//   f = _codegen.compile(graph_json, examples, cuda_host_shim=False, inside_autograd=False,
//                        name="graph")                                 # a FusedFunction
//   f(*tensors) -> outputs;  f.report -> {"program", "kernels": [...], "externs", ...}
//   _codegen.lowered_ops() -> [(name, kind, forms)]
//   _codegen.lower(graph_json) -> {"program", "kernels": [{name, nodes, source, params}],
//                                  "buffers": [{node, kind, dtype, shape, strides}], "steps"}
//   _codegen.compile_kernel(source, symbol) -> (address, shared object)   (dynamo-minify's
//                                  --after=kernel repro runs one kernel through these two)
//   _codegen.nvrtc_available() -> (bool, why);  _codegen.nvrtc_compile(src, name, arch)
//   _codegen.cubin_functions(bytes) -> (e_machine, [names]);  _codegen.cache_dir()
//   _codegen.cache_read(name) -> bytes | None;  _codegen.cache_write(name, bytes)   (whole-graph
//                                  entries of the fused backend: python/dynamo/aot/graph_cache.py)
// The graph comes as JSON (Graph.serialize()) and is resolved by qualified name.
#include "bindings.h"
#include "dynamo/backends/fused.h"
#include "dynamo/codegen/emit.h"
#include "dynamo/codegen/kernel_cache.h"
#include "dynamo/codegen/lowering.h"
#include "dynamo/codegen/nvrtc.h"
#include "dynamo/core/graph_python.h"
#include "dynamo/core/graph_serializer.h"
#include "py_util.h"

namespace dynamo::py {
namespace {

struct FusedObject {
  PyObject_HEAD
  core::CompiledGraphFn* fn;
  PyObject* report;  // owned
};

void fusedDealloc(PyObject* self) {
  auto* o = reinterpret_cast<FusedObject*>(self);
  delete o->fn;
  Py_XDECREF(o->report);
  Py_TYPE(self)->tp_free(self);
}

PyObject* fusedCall(PyObject* self, PyObject* args, PyObject*) {
  auto* o = reinterpret_cast<FusedObject*>(self);
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  std::vector<PyObject*> in(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) in[i] = PyTuple_GET_ITEM(args, i);  // borrowed
  size_t failed = 0;
  return o->fn->call(in.data(), in.size(), &failed);
}

PyObject* fusedReport(PyObject* self, void*) {
  auto* o = reinterpret_cast<FusedObject*>(self);
  Py_INCREF(o->report);
  return o->report;
}

PyGetSetDef fusedGetSet[] = {
    {"report", fusedReport, nullptr, "what the backend made: program, kernels, externs", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject FusedType{};  // filled in initCodegenBindings

// The fused backend's report as a dict (new ref); throws PythonError.
PyObject* reportToPython(const backends::FusedReport& r) {
  PyRef kernels = PyRef::steal(checkPy(PyList_New(0)));
  for (const auto& k : r.kernels) {
    PyRef d = PyRef::steal(checkPy(PyDict_New()));
    setItem(d.get(), "name", newStr(k.name));
    setItem(d.get(), "nodes", newStrList(k.nodes));
    setItem(d.get(), "source", newStr(k.source));
    setItem(d.get(), "cuda_source", newStr(k.cudaSource));
    setItem(d.get(), "loops", newStr(k.loops));
    setItem(d.get(), "cache_key", newStr(k.cacheKey));
    setItem(d.get(), "cache_hit", PyBool_FromLong(k.cacheHit));
    setItem(d.get(), "compile_ms", PyFloat_FromDouble(k.compileMs));
    appendItem(kernels.get(), d.release());
  }
  PyRef externs = PyRef::steal(checkPy(PyList_New(0)));
  for (const auto& [node, why] : r.externs)
    appendItem(externs.get(), Py_BuildValue("(NN)", newStr(node), newStr(why)));
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "program", newStr(r.program));
  setItem(d.get(), "kernels", std::move(kernels));
  setItem(d.get(), "externs", std::move(externs));
  setItem(d.get(), "arena_bytes", newInt(r.arenaBytes));
  setItem(d.get(), "eager_reason", newStr(r.eagerReason));
  return d.release();
}

PyObject* compileGraph(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"graph_json", "examples", "cuda_host_shim", "inside_autograd", "name", "size_scope",
                                 nullptr};
  const char* json;
  PyObject* examples;  // borrowed
  int shim = 0, insideAutograd = 0;
  const char* name = "graph";
  const char* sizeScope = "";  // non-empty: kernels take the sizes that vary in this scope as parameters
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|ppss", const_cast<char**>(kwlist), &json, &examples, &shim,
                                   &insideAutograd, &name, &sizeScope)) {
    return nullptr;
  }
  DYNAMO_PY_TRY
  core::Graph graph = core::resolveTargets(core::readGraphJson(json));
  std::vector<core::PyObjectRef> ex;
  PyObject* fast = PySequence_Fast(examples, "examples must be a sequence");  // new ref
  if (!fast) return nullptr;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); ++i) {
    ex.push_back(core::PyObjectRef::borrow(PySequence_Fast_GET_ITEM(fast, i)));
  }
  Py_DECREF(fast);
  core::BackendRequest req{graph, ex, name, {}, false};
  backends::FusedReport report;
  backends::FusedOptions options;
  options.cudaHostShim = shim != 0;
  options.insideAutograd = insideAutograd != 0;
  options.sizeScope = sizeScope;
  options.sizeParams = *sizeScope != '\0';
  std::unique_ptr<core::CompiledGraphFn> fn = backends::compileFused(req, &report, options);
  PyObject* rep = reportToPython(report);
  auto* o = PyObject_New(FusedObject, &FusedType);
  if (!o) {
    Py_DECREF(rep);
    return nullptr;
  }
  o->fn = fn.release();
  o->report = rep;
  return reinterpret_cast<PyObject*>(o);
  DYNAMO_PY_CATCH(nullptr)
}

// probe(graph_json, size_scope, inside_autograd=True) -> int: the probe lowering of a graph traced
// at probe sizes (backends::registerSizeFamilies; nothing compiled).
PyObject* probeGraph(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"graph_json", "size_scope", "inside_autograd", nullptr};
  const char* json;
  const char* sizeScope;
  int insideAutograd = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ss|p", const_cast<char**>(kwlist), &json, &sizeScope,
                                   &insideAutograd)) {
    return nullptr;
  }
  if (*sizeScope == '\0') {
    PyErr_SetString(PyExc_ValueError, "probe: size_scope must not be empty (the families the probe registers)");
    return nullptr;
  }
  DYNAMO_PY_TRY
  core::Graph graph = core::resolveTargets(core::readGraphJson(json));
  backends::FusedOptions options;
  options.insideAutograd = insideAutograd != 0;
  options.sizeScope = sizeScope;
  options.sizeParams = true;
  return PyLong_FromSize_t(backends::registerSizeFamilies(graph, options));
  DYNAMO_PY_CATCH(nullptr)
}

const char* bufferKindName(codegen::BufferKind k) {
  switch (k) {
    case codegen::BufferKind::kInput: return "input";
    case codegen::BufferKind::kExtern: return "extern";
    case codegen::BufferKind::kOutput: return "output";
    case codegen::BufferKind::kIntermediate: return "intermediate";
  }
  return "?";
}

// The program the fused backend would make of a graph (its default lowering options), without
// compiling anything: each kernel's C++ source and parameters, each buffer's layout.
PyObject* lowerProgram(PyObject*, PyObject* args) {
  const char* json;
  if (!PyArg_ParseTuple(args, "s", &json)) return nullptr;
  DYNAMO_PY_TRY
  core::Graph graph = core::resolveTargets(core::readGraphJson(json));
  codegen::Program program = codegen::lowerGraph(graph);
  PyRef kernels = PyRef::steal(checkPy(PyList_New(0)));
  for (const codegen::Kernel& k : program.kernels) {
    std::vector<int> params = codegen::kernelParams(k);
    PyRef d = PyRef::steal(checkPy(PyDict_New()));
    setItem(d.get(), "name", newStr(k.name));
    setItem(d.get(), "nodes", newStrList(k.nodes()));
    setItem(d.get(), "source", newStr(codegen::emitCpp(k, program)));
    setItem(d.get(), "params", newIntList(std::vector<int64_t>(params.begin(), params.end())));
    appendItem(kernels.get(), d.release());
  }
  PyRef buffers = PyRef::steal(checkPy(PyList_New(0)));
  for (const codegen::Buffer& b : program.buffers) {
    PyRef d = PyRef::steal(checkPy(PyDict_New()));
    setItem(d.get(), "node", newStr(b.node));
    setItem(d.get(), "kind", newStr(bufferKindName(b.kind)));
    setItem(d.get(), "dtype", newStr(codegen::dtypeName(b.dtype)));
    setItem(d.get(), "shape", newIntList(b.shape));
    setItem(d.get(), "strides", newIntList(b.strides));
    appendItem(buffers.get(), d.release());
  }
  PyRef steps = PyRef::steal(checkPy(PyList_New(0)));
  for (const codegen::Step& st : program.steps)
    appendItem(steps.get(), Py_BuildValue("(si)", st.isKernel ? "kernel" : "extern", st.isKernel ? st.kernel : st.node));
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "program", newStr(codegen::printProgram(program)));
  setItem(d.get(), "kernels", std::move(kernels));
  setItem(d.get(), "buffers", std::move(buffers));
  setItem(d.get(), "steps", std::move(steps));
  return d.release();
  DYNAMO_PY_CATCH(nullptr)
}

// One kernel's C++ source compiled and loaded the way the fused backend does it (same compiler,
// flags and cache; a compiler failure raises the same InternalError).
PyObject* compileKernel(PyObject*, PyObject* args) {
  const char *source, *symbol;
  if (!PyArg_ParseTuple(args, "ss", &source, &symbol)) return nullptr;
  DYNAMO_PY_TRY
  std::vector<codegen::CompileJob> jobs{{source, symbol, {}}};
  std::vector<codegen::LoadedKernel> loaded;
  std::exception_ptr failure;
  Py_BEGIN_ALLOW_THREADS
  try {
    loaded = codegen::compileKernels(jobs);
  } catch (...) {
    failure = std::current_exception();
  }
  Py_END_ALLOW_THREADS
  if (failure) std::rethrow_exception(failure);
  return Py_BuildValue("(Ns)", PyLong_FromVoidPtr(loaded[0].symbol), loaded[0].path.c_str());
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* loweredOps(PyObject*, PyObject*) {
  PyObject* l = PyList_New(0);
  for (const auto& op : codegen::loweredOps()) {
    PyObject* t = Py_BuildValue("(sss)", op.name, op.kind, op.forms);
    PyList_Append(l, t);
    Py_XDECREF(t);
  }
  return l;
}

PyObject* nvrtcAvailable(PyObject*, PyObject*) {
  std::string why;
  bool ok = codegen::nvrtcAvailable(&why);
  return Py_BuildValue("(Ns)", PyBool_FromLong(ok), ok ? codegen::nvrtcVersion().c_str() : why.c_str());
}

PyObject* nvrtcCompile(PyObject*, PyObject* args) {
  const char *src, *name, *arch;
  if (!PyArg_ParseTuple(args, "sss", &src, &name, &arch)) return nullptr;
  codegen::NvrtcOutput out;
  Py_BEGIN_ALLOW_THREADS
  out = codegen::nvrtcCompile(src, name, arch);
  Py_END_ALLOW_THREADS
  return Py_BuildValue("(NsN)", PyBool_FromLong(out.ok), out.log.c_str(),
                       PyBytes_FromStringAndSize(out.binary.data(), static_cast<Py_ssize_t>(out.binary.size())));
}

PyObject* cubinFunctions(PyObject*, PyObject* arg) {
  char* data;
  Py_ssize_t size;
  if (PyBytes_AsStringAndSize(arg, &data, &size) < 0) return nullptr;
  DYNAMO_PY_TRY
  codegen::CubinInfo info = codegen::readCubin(std::string(data, static_cast<size_t>(size)));
  return Py_BuildValue("(iN)", info.machine, newStrList(info.functions));
  DYNAMO_PY_CATCH(nullptr)
}

// cache_read(name) -> bytes or None; cache_write(name, bytes): codegen's readCacheFile /
// writeCacheFile (the fused backend's whole-graph entries, python/dynamo/aot/graph_cache.py).
PyObject* cacheRead(PyObject*, PyObject* args) {
  const char* name;
  if (!PyArg_ParseTuple(args, "s", &name)) return nullptr;
  DYNAMO_PY_TRY
  std::optional<std::string> bytes;
  std::exception_ptr failure;
  Py_BEGIN_ALLOW_THREADS
  try {
    bytes = codegen::readCacheFile(name);
  } catch (...) {
    failure = std::current_exception();
  }
  Py_END_ALLOW_THREADS
  if (failure) std::rethrow_exception(failure);
  if (!bytes) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(bytes->data(), static_cast<Py_ssize_t>(bytes->size()));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* cacheWrite(PyObject*, PyObject* args) {
  const char* name;
  PyObject* data;  // borrowed
  if (!PyArg_ParseTuple(args, "sO!", &name, &PyBytes_Type, &data)) return nullptr;
  char* ptr;
  Py_ssize_t size;
  if (PyBytes_AsStringAndSize(data, &ptr, &size) < 0) return nullptr;
  DYNAMO_PY_TRY
  std::string bytes(ptr, static_cast<size_t>(size));
  std::exception_ptr failure;
  Py_BEGIN_ALLOW_THREADS
  try {
    codegen::writeCacheFile(name, bytes);
  } catch (...) {
    failure = std::current_exception();
  }
  Py_END_ALLOW_THREADS
  if (failure) std::rethrow_exception(failure);
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* cacheDir(PyObject*, PyObject*) { return PyUnicode_FromString(codegen::kernelCacheDir().c_str()); }

PyObject* kernelCounters(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  backends::FusedCounters c = backends::fusedCounters();
  PyRef d = PyRef::steal(checkPy(PyDict_New()));
  setItem(d.get(), "units_loaded", newInt(c.unitsLoaded));
  setItem(d.get(), "lowerings", newInt(c.lowerings));
  setItem(d.get(), "compiler_runs", newInt(c.compilerRuns));
  setItem(d.get(), "program_hits", newInt(c.programHits));
  setItem(d.get(), "program_misses", newInt(c.programMisses));
  setItem(d.get(), "program_stores", newInt(c.programStores));
  setItem(d.get(), "program_rejected", newInt(c.programRejected));
  return d.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef methods[] = {
    {"compile", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(compileGraph)),
     METH_VARARGS | METH_KEYWORDS, "compile(graph_json, examples, cuda_host_shim=False, inside_autograd=False, name='graph') -> FusedFunction"},
    {"probe", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(probeGraph)), METH_VARARGS | METH_KEYWORDS,
     "probe(graph_json, size_scope, inside_autograd=True) -> kernels whose templates were registered in the scope "
     "as a parametrised lowering (nothing compiled)"},
    {"lower", lowerProgram, METH_VARARGS, "lower(graph_json) -> {program, kernels, buffers, steps} (nothing compiled)"},
    {"compile_kernel", compileKernel, METH_VARARGS, "compile_kernel(source, symbol) -> (address, shared object)"},
    {"lowered_ops", loweredOps, METH_NOARGS, "[(name, kind, forms)] of lowered_ops.def"},
    {"nvrtc_available", nvrtcAvailable, METH_NOARGS, "(available, version or why not)"},
    {"nvrtc_compile", nvrtcCompile, METH_VARARGS, "nvrtc_compile(source, name, arch) -> (ok, log, binary)"},
    {"cubin_functions", cubinFunctions, METH_O, "cubin_functions(bytes) -> (e_machine, [function names])"},
    {"cache_dir", cacheDir, METH_NOARGS, "the kernel cache directory"},
    {"cache_read", cacheRead, METH_VARARGS, "cache_read(name) -> bytes of <cache dir>/name, or None"},
    {"cache_write", cacheWrite, METH_VARARGS, "cache_write(name, bytes): temp file + rename under the key's lock"},
    {"counters", kernelCounters, METH_NOARGS,
     "{units_loaded, compiler_runs, lowerings, program_hits, program_misses, program_stores, program_rejected}: "
     "kernel libraries this process has loaded and built with the compiler; graphs the fused backend lowered; "
     "program cache lookups and writes"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int initCodegenBindings(PyObject* module) {
  // What PyVarObject_HEAD_INIT would set: one reference, owned by this static storage.
  Py_SET_REFCNT(reinterpret_cast<PyObject*>(&FusedType), 1);
  FusedType.tp_name = "dynamo._C._codegen.FusedFunction";
  FusedType.tp_basicsize = sizeof(FusedObject);
  FusedType.tp_flags = Py_TPFLAGS_DEFAULT;
  FusedType.tp_dealloc = fusedDealloc;
  FusedType.tp_call = fusedCall;
  FusedType.tp_getset = fusedGetSet;
  FusedType.tp_doc = "a graph compiled by the fused backend";
  if (PyType_Ready(&FusedType) < 0) return -1;
  PyObject* sub = PyModule_New("dynamo._C._codegen");  // new ref
  if (!sub) return -1;
  if (PyModule_AddFunctions(sub, methods) < 0 ||
      PyModule_AddObjectRef(sub, "FusedFunction", reinterpret_cast<PyObject*>(&FusedType)) < 0 ||
      PyModule_AddObject(module, "_codegen", sub) < 0) {  // steals sub on success
    Py_DECREF(sub);
    return -1;
  }
  return 0;
}

}  // namespace dynamo::py
