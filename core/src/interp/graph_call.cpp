// The CompiledGraph Python type (see graph_call.h). This is on the hot path of every compiled
// call: vectorcall, no allocation beyond the value arrays, no Python-level dispatch.
#include "graph_call.h"

#include <vector>

#include "dynamo/core/frame_hook.h"
#include "torch_api.h"

namespace dynamo::core::interp {

namespace {

struct CompiledGraphObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  GraphCallSpec* spec;
};

// Fetched values of one call (new refs), released on scope exit.
struct Fetched {
  std::vector<PyObject*> values;
  explicit Fetched(size_t n) : values(n, nullptr) {}
  ~Fetched() {
    for (PyObject* v : values) Py_XDECREF(v);
  }
};

}  // namespace

PyObject* makeTupleSubclass(PyObject* cls, PyObject* items) {
  // namedtuple classes take the fields as arguments (cls._make(items)); structseq types such as
  // torch.return_types.max take one sequence.
  PyObject* make = PyObject_GetAttrString(cls, "_make");  // new ref
  if (make != nullptr) {
    PyObject* r = PyObject_CallOneArg(make, items);  // new ref
    Py_DECREF(make);
    return r;
  }
  PyErr_Clear();
  return PyObject_CallOneArg(cls, items);
}

namespace {

PyObject* build(const OutPlan& plan, PyObject* outputs, const Fetched& fetched, std::vector<PyObject*>& memo) {
  switch (plan.kind) {
    case OutPlan::Kind::kGraphOutput: {
      PyObject* v = PyTuple_GET_ITEM(outputs, plan.index);  // borrowed ref
      Py_INCREF(v);
      return v;
    }
    case OutPlan::Kind::kConst:
      Py_INCREF(plan.obj.get());
      return plan.obj.get();
    case OutPlan::Kind::kMemoRef: {
      PyObject* v = memo[plan.index];  // owned by memo
      if (v == nullptr) {  // only after a failed run, where not every value was built
        PyErr_SetString(PyExc_RuntimeError, "value not built");
        return nullptr;
      }
      Py_INCREF(v);
      return v;
    }
    case OutPlan::Kind::kFetched: {
      PyObject* v = fetched.values[plan.index];  // borrowed ref
      Py_INCREF(v);
      return v;
    }
    case OutPlan::Kind::kTuple:
    case OutPlan::Kind::kNamedTuple:
    case OutPlan::Kind::kList: {
      bool list = plan.kind == OutPlan::Kind::kList;
      Py_ssize_t n = static_cast<Py_ssize_t>(plan.children.size());
      PyObject* out = list ? PyList_New(n) : PyTuple_New(n);  // new ref
      if (out == nullptr) return nullptr;
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = build(plan.children[i], outputs, fetched, memo);  // new ref
        if (item == nullptr) {
          Py_DECREF(out);
          return nullptr;
        }
        if (list) PyList_SET_ITEM(out, i, item);
        else PyTuple_SET_ITEM(out, i, item);
      }
      if (plan.memo >= 0) {
        Py_INCREF(out);
        memo[plan.memo] = out;
      }
      if (plan.kind == OutPlan::Kind::kNamedTuple) {
        PyObject* nt = makeTupleSubclass(plan.obj.get(), out);  // new ref
        Py_DECREF(out);
        return nt;
      }
      return out;
    }
    case OutPlan::Kind::kDict: {
      // OrderedDict keeps its own order list: it is filled through its own __setitem__.
      PyObject* out = plan.obj ? PyObject_CallNoArgs(plan.obj.get()) : PyDict_New();  // new ref
      if (out == nullptr) return nullptr;
      for (size_t i = 0; i < plan.children.size(); ++i) {
        PyObject* item = build(plan.children[i], outputs, fetched, memo);  // new ref
        int rc = item == nullptr ? -1
                 : plan.obj ? PyObject_SetItem(out, plan.keys[i].get(), item)
                            : PyDict_SetItem(out, plan.keys[i].get(), item);
        if (rc < 0) {
          Py_XDECREF(item);
          Py_DECREF(out);
          return nullptr;
        }
        Py_DECREF(item);
      }
      if (plan.memo >= 0) {
        Py_INCREF(out);
        memo[plan.memo] = out;
      }
      return out;
    }
    case OutPlan::Kind::kGetAttr: {
      PyObject* base = build(plan.children[0], outputs, fetched, memo);  // new ref
      if (base == nullptr) return nullptr;
      PyObject* r = PyObject_GetAttrString(base, plan.name.c_str());  // new ref
      Py_DECREF(base);
      return r;
    }
    case OutPlan::Kind::kBoundMethod: {
      // MethodType(function, self): exact even when getattr(self, name) would find an override.
      PyObject* self = build(plan.children[0], outputs, fetched, memo);  // new ref
      if (self == nullptr) return nullptr;
      PyObject* m = PyMethod_New(plan.obj.get(), self);  // new ref
      Py_DECREF(self);
      return m;
    }
    case OutPlan::Kind::kSlice: {
      PyObject* a = build(plan.children[0], outputs, fetched, memo);
      PyObject* b = a ? build(plan.children[1], outputs, fetched, memo) : nullptr;
      PyObject* c = b ? build(plan.children[2], outputs, fetched, memo) : nullptr;
      PyObject* s = c ? PySlice_New(a, b, c) : nullptr;
      Py_XDECREF(a);
      Py_XDECREF(b);
      Py_XDECREF(c);
      return s;
    }
  }
  return nullptr;
}

// target's items become those of `contents` (a dict), in its order. Exact dicts through the C
// API; a subclass (OrderedDict, defaultdict, a user's dict class) through the methods of the
// builtin mapping it derives from, so OrderedDict's order list stays right and no user
// __setitem__ runs a second time (the tracer replays what it did separately).
int replaceDictContents(PyObject* target, PyObject* contents) {
  if (PyDict_CheckExact(target)) {
    PyDict_Clear(target);
    return PyDict_Update(target, contents);
  }
  PyObject* orderedDict = torchApi().orderedDictType;  // borrowed (filled when tracing began)
  PyObject* base = (PyObject*)&PyDict_Type;  // borrowed ref
  if (orderedDict != nullptr && PyObject_IsInstance(target, orderedDict) == 1) base = orderedDict;
  PyObject* r = PyObject_CallMethod(base, "clear", "O", target);  // new ref
  if (r == nullptr) return -1;
  Py_DECREF(r);
  PyObject* setitem = PyObject_GetAttrString(base, "__setitem__");  // new ref
  if (setitem == nullptr) return -1;
  PyObject *key, *value;  // borrowed refs
  Py_ssize_t pos = 0;
  int rc = 0;
  while (rc == 0 && PyDict_Next(contents, &pos, &key, &value)) {
    PyObject* done = PyObject_CallFunctionObjArgs(setitem, target, key, value, nullptr);  // new ref
    if (done == nullptr) rc = -1;
    Py_XDECREF(done);
  }
  Py_DECREF(setitem);
  return rc;
}

int applyEffect(const EffectPlan& e, PyObject* outputs, const Fetched& fetched, std::vector<PyObject*>& memo) {
  PyObject* target = build(e.target, outputs, fetched, memo);  // new ref
  if (target == nullptr) return -1;
  int rc = 0;
  if (e.kind == EffectPlan::Kind::kSetAttr || e.kind == EffectPlan::Kind::kSetItem) {
    PyObject* value = build(e.value, outputs, fetched, memo);  // new ref
    if (value == nullptr) {
      rc = -1;
    } else if (e.kind == EffectPlan::Kind::kSetAttr) {
      rc = PyObject_SetAttrString(target, e.name.c_str(), value);
    } else {
      PyObject* key = PyUnicode_FromString(e.name.c_str());  // new ref
      rc = key ? PyObject_SetItem(target, key, value) : -1;
      Py_XDECREF(key);
    }
    Py_XDECREF(value);
  } else {
    PyObject* value = build(e.value, outputs, fetched, memo);  // new ref: the new contents
    if (value == nullptr) {
      rc = -1;
    } else if (e.kind == EffectPlan::Kind::kListContents) {
      rc = PyList_SetSlice(target, 0, PyList_GET_SIZE(target), value);
    } else {
      rc = replaceDictContents(target, value);
    }
    Py_XDECREF(value);
  }
  Py_DECREF(target);
  return rc;
}

// After a graph run that failed at body node `failedAt`: the setattrs recorded before that node,
// and for each container the last change recorded before it, in program order. Effects whose
// values are graph outputs cannot be built (the run produced none) and are left out. The
// pending Python error is kept.
void applyEffectsBefore(const GraphCallSpec& spec, size_t failedAt, const Fetched& fetched) {
  if (spec.effects.empty()) return;
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  PyObject* none = PyTuple_New(0);  // new ref: no outputs
  std::vector<PyObject*> memo(static_cast<size_t>(spec.memoSlots), nullptr);
  for (size_t k = 0; none != nullptr && k < spec.effects.size(); ++k) {
    const EffectPlan& e = spec.effects[k];
    if (e.bodyBefore > failedAt || e.usesOutputs) continue;
    if (e.nextSameTarget >= 0 && spec.effects[e.nextSameTarget].bodyBefore <= failedAt) continue;
    if (applyEffect(e, none, fetched, memo) < 0) PyErr_Clear();
  }
  for (PyObject* o : memo) Py_XDECREF(o);
  Py_XDECREF(none);
  PyErr_Restore(et, ev, tb);
}

// After a graph that switches grad mode (a `with torch.no_grad()` block) raised part-way: back to
// the mode the frame was entered with, as the block's __exit__ does in eager. The error stays set.
void restoreGradMode(bool enabled) {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  PyObject* torchC = PyImport_ImportModule("torch._C");  // new ref
  PyObject* r = torchC ? PyObject_CallMethod(torchC, "_set_grad_enabled", "O", enabled ? Py_True : Py_False) : nullptr;
  Py_XDECREF(r);
  Py_XDECREF(torchC);
  PyErr_Clear();
  PyErr_Restore(et, ev, tb);
}

// After a graph with autocast or inference-mode blocks raised part-way: the blocks still open are
// left, innermost first, as their __exit__ does in eager when the exception passes through. The
// error stays set.
void leaveContextBlocks() {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  PyObject* m = PyImport_ImportModule("dynamo.context_nodes");  // new ref
  PyObject* r = m ? PyObject_CallMethod(m, "unwind", nullptr) : nullptr;  // new ref
  Py_XDECREF(r);
  Py_XDECREF(m);
  PyErr_Clear();
  PyErr_Restore(et, ev, tb);
}

PyObject* compiledGraphCall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const GraphCallSpec& spec = *reinterpret_cast<CompiledGraphObject*>(self)->spec;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != spec.nargs || kwnames != nullptr) {
    PyErr_Format(PyExc_TypeError, "internal error: %s expects %d arguments, got %zd. This is a bug in Dynamo.",
                 spec.name.c_str(), spec.nargs, nargs);
    return nullptr;
  }
  // Python run from here (torch.nn.functional inside the graph, backends, Module.__setattr__,
  // namedtuple._make) is never captured.
  HookSuspension suspended;
  Fetched fetched(spec.fetches.size());
  for (size_t i = 0; i < spec.fetches.size(); ++i) {
    const FetchStep& f = spec.fetches[i];
    PyObject* v;
    if (f.base < 0) {
      v = args[f.arg];  // borrowed ref
      Py_INCREF(v);
    } else {
      v = f.source.fetchFrom(fetched.values[f.base]);  // new ref
      if (v == nullptr) return nullptr;
    }
    fetched.values[i] = v;
  }
  PyObject* outputs = nullptr;  // new ref: the graph's output tuple
  if (spec.hasGraph) {
    PyObject* inputsSmall[16];
    std::vector<PyObject*> inputsBig;
    PyObject** inputs = inputsSmall;
    if (spec.graphInputs.size() > 16) {
      inputsBig.resize(spec.graphInputs.size());
      inputs = inputsBig.data();
    }
    for (size_t i = 0; i < spec.graphInputs.size(); ++i) inputs[i] = fetched.values[spec.graphInputs[i]];
    // A node that raises: its error propagates as eager's would, after the side effects that
    // come before it in program order (the runner says which node; a backend's callable does
    // not, so only those before the first node are known to precede it).
    size_t failedAt = 0;
    outputs = spec.fn->call(inputs, spec.graphInputs.size(), &failedAt);
    if (outputs == nullptr) {
      // The blocks first: leaving an inference-mode block restores the grad mode it was entered in.
      if (spec.leavesContextBlocks) leaveContextBlocks();
      if (spec.restoreGradMode >= 0) restoreGradMode(spec.restoreGradMode != 0);
      applyEffectsBefore(spec, failedAt, fetched);
      return nullptr;
    }
    if (!PyTuple_Check(outputs)) {
      // Backends may return a list (FX GraphModules return what the output node holds).
      if (!PyList_Check(outputs)) {
        PyErr_Format(PyExc_TypeError,
                     "the backend's compiled function for the %s returned %s; it must return the graph's "
                     "outputs as a tuple or list (as the GraphModule it was given does)",
                     spec.name.c_str(), Py_TYPE(outputs)->tp_name);
        Py_DECREF(outputs);
        return nullptr;
      }
      PyObject* t = PySequence_Tuple(outputs);  // new ref
      Py_DECREF(outputs);
      if (t == nullptr) return nullptr;
      outputs = t;
    }
    if (PyTuple_GET_SIZE(outputs) != static_cast<Py_ssize_t>(spec.numOutputs)) {
      PyErr_Format(PyExc_TypeError,
                   "the backend's compiled function for the %s returned %zd outputs; the graph has %zd",
                   spec.name.c_str(), PyTuple_GET_SIZE(outputs), static_cast<Py_ssize_t>(spec.numOutputs));
      Py_DECREF(outputs);
      return nullptr;
    }
  } else {
    outputs = PyTuple_New(0);
  }
  // Containers that appear in several places are built once (identity is preserved).
  struct Memo {
    std::vector<PyObject*> objs;
    ~Memo() {
      for (PyObject* o : objs) Py_XDECREF(o);
    }
  } memo;
  memo.objs.assign(static_cast<size_t>(spec.memoSlots), nullptr);
  PyObject* result = nullptr;
  if (spec.returnSingle) {
    result = build(spec.results[0], outputs, fetched, memo.objs);
  } else {
    result = PyTuple_New(static_cast<Py_ssize_t>(spec.results.size()));
    for (size_t i = 0; result && i < spec.results.size(); ++i) {
      PyObject* item = build(spec.results[i], outputs, fetched, memo.objs);
      if (item == nullptr) {
        Py_CLEAR(result);
        break;
      }
      PyTuple_SET_ITEM(result, i, item);
    }
  }
  if (result != nullptr) {
    for (const EffectPlan& e : spec.effects) {
      if (!e.final) continue;
      if (applyEffect(e, outputs, fetched, memo.objs) < 0) {
        Py_CLEAR(result);
        break;
      }
    }
  }
  Py_DECREF(outputs);
  return result;
}

void compiledGraphDealloc(PyObject* self) {
  auto* o = reinterpret_cast<CompiledGraphObject*>(self);
  delete o->spec;
  Py_TYPE(self)->tp_free(self);
}

PyObject* compiledGraphRepr(PyObject* self) {
  auto* o = reinterpret_cast<CompiledGraphObject*>(self);
  return PyUnicode_FromFormat("<dynamo compiled graph %s>", o->spec->name.c_str());
}

PyTypeObject compiledGraphType = [] {
  PyTypeObject t{};
  t.ob_base = PyVarObject_HEAD_INIT(nullptr, 0) t.tp_name = "dynamo._C.CompiledGraph";
  t.tp_basicsize = sizeof(CompiledGraphObject);
  t.tp_dealloc = compiledGraphDealloc;
  t.tp_vectorcall_offset = offsetof(CompiledGraphObject, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_repr = compiledGraphRepr;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_doc = "A captured graph with its input fetching and output rebuilding (internal).";
  return t;
}();

}  // namespace

PyObject* makeCompiledGraph(std::unique_ptr<GraphCallSpec> spec) {
  if (PyType_Ready(&compiledGraphType) < 0) return nullptr;
  auto* o = PyObject_New(CompiledGraphObject, &compiledGraphType);  // new ref
  if (o == nullptr) return nullptr;
  o->vectorcall = compiledGraphCall;
  o->spec = spec.release();
  return reinterpret_cast<PyObject*>(o);
}

const GraphCallSpec* compiledGraphSpec(PyObject* obj) {
  if (Py_TYPE(obj) != &compiledGraphType) return nullptr;
  return reinterpret_cast<CompiledGraphObject*>(obj)->spec;
}

int registerCompiledGraphType(PyObject* module) {
  if (PyType_Ready(&compiledGraphType) < 0) return -1;
  Py_INCREF(&compiledGraphType);
  if (PyModule_AddObject(module, "CompiledGraph", (PyObject*)&compiledGraphType) < 0) {
    Py_DECREF(&compiledGraphType);
    return -1;
  }
  return 0;
}

}  // namespace dynamo::core::interp
