// dynamo._C._aot: what python/dynamo/aot needs from C++: the partitioner (backends/partition.h)
// over a joint graph given as core's JSON (graph_serializer.h), and the decomposition groups and
// core op set of backends/decompositions.def.
//
//   _aot.partition(joint_json, num_primals, num_fwd_outputs, save_all=False, disabled_ops=())
//       -> {"forward": json, "backward": json, "saved": [...], "recomputed": [...],
//           "bytes_saved": int, "summary": str}
//   _aot.decomposition_groups() -> [(name, [ops], description)]
//   _aot.core_ops() -> [schema name]
#include <sstream>

#include "bindings.h"
#include "dynamo/backends/partition.h"
#include "dynamo/core/graph_serializer.h"
#include "py_util.h"

namespace dynamo::py {
namespace {

PyObject* partition(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"joint_json", "num_primals", "num_fwd_outputs", "save_all",
                                 "disabled_ops", nullptr};
  PyObject* json;                    // borrowed refs
  PyObject* disabled = nullptr;
  Py_ssize_t numPrimals = 0, numFwd = 0;
  int saveAll = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Unn|pO:partition", const_cast<char**>(kwlist), &json,
                                   &numPrimals, &numFwd, &saveAll, &disabled)) {
    return nullptr;
  }
  DYNAMO_PY_TRY
  backends::PartitionOptions opts;
  opts.mode = saveAll ? backends::PartitionMode::kSaveAll : backends::PartitionMode::kMinCut;
  if (disabled != nullptr && disabled != Py_None) {
    PyRef fast = PyRef::steal(checkPy(PySequence_Fast(disabled, "disabled_ops must be a sequence of str")));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i)
      opts.disabledRecomputeOps.push_back(toString(PySequence_Fast_GET_ITEM(fast.get(), i)));
  }
  core::Graph joint = core::readGraphJson(toString(json));
  backends::JointSignature sig{static_cast<size_t>(numPrimals), static_cast<size_t>(numFwd)};
  backends::Partition p = backends::partitionJoint(joint, sig, opts);
  PyRef out = PyRef::steal(checkPy(PyDict_New()));
  setItem(out.get(), "forward", newStr(core::serializeGraph(p.forward)));
  setItem(out.get(), "backward", newStr(core::serializeGraph(p.backward)));
  setItem(out.get(), "saved", newStrList(p.saved));
  setItem(out.get(), "recomputed", newStrList(p.recomputed));
  setItem(out.get(), "bytes_saved", newInt(p.bytesSaved));
  setItem(out.get(), "summary", newStr(p.summary()));
  return out.release();
  DYNAMO_PY_CATCH(nullptr)
}

std::vector<std::string> splitWords(const char* text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

PyObject* decompositionGroups(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
#define DYNAMO_DECOMP_GROUP(Name, name, ops, description)                                       \
  {                                                                                             \
    PyRef n = PyRef::steal(newStr(name)), o = PyRef::steal(newStrList(splitWords(ops)));      \
    PyRef d = PyRef::steal(newStr(description));                                              \
    appendItem(list.get(), PyTuple_Pack(3, n.get(), o.get(), d.get()));                       \
  }
#include "../../backends/decompositions.def"
  return list.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* coreOps(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  std::vector<std::string> ops;
#define DYNAMO_CORE_OP(op) ops.push_back(op);
#include "../../backends/decompositions.def"
  return newStrList(ops);
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef aotMethods[] = {
    {"partition", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(partition)),
     METH_VARARGS | METH_KEYWORDS,
     "partition(joint_json, num_primals, num_fwd_outputs, save_all=False, disabled_ops=()) -> dict\n\n"
     "Splits a joint forward/backward graph (core JSON) into forward and backward graphs."},
    {"decomposition_groups", decompositionGroups, METH_NOARGS,
     "[(name, [aten ops], description)] of backends/decompositions.def."},
    {"core_ops", coreOps, METH_NOARGS, "The core ATen op set of backends/decompositions.def."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef aotModuleDef = {
    PyModuleDef_HEAD_INIT, "dynamo._C._aot",
    "The AOT layer's partitioner and decomposition tables.", -1, aotMethods,
    nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

int initAotBindings(PyObject* module) {
  return addSubmodule(module, "_aot", PyModule_Create(&aotModuleDef));
}

}  // namespace dynamo::py
