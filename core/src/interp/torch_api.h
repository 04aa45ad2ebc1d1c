// The Python objects the interpreter needs to recognise (torch.Tensor, torch.nn.Module, operator
// functions, grad-mode context managers, ...), looked up once, and small helpers over them.
// Trace time only: nothing here is on the hot path of a compiled call.
#pragma once

#include <Python.h>

#include <string>

#include "dynamo/core/graph_pyref.h"

namespace dynamo::core::interp {

/// Borrowed references to well-known objects, valid for the life of the process.
struct TorchApi {
  PyObject* torch;            ///< the torch module
  PyObject* tensorType;       ///< torch.Tensor
  PyObject* parameterType;    ///< torch.nn.Parameter
  PyObject* moduleType;       ///< torch.nn.Module
  PyObject* sequentialType;   ///< torch.nn.Sequential
  PyObject* moduleListType;   ///< torch.nn.ModuleList
  PyObject* moduleDictType;   ///< torch.nn.ModuleDict
  PyObject* dtypeType;        ///< torch.dtype
  PyObject* deviceType;       ///< torch.device
  PyObject* sizeType;         ///< torch.Size
  PyObject* emptyStrided;     ///< torch.empty_strided
  PyObject* noGrad;           ///< torch.no_grad (class)
  PyObject* enableGrad;       ///< torch.enable_grad (class)
  PyObject* setGradEnabled;   ///< torch._C._set_grad_enabled
  PyObject* isGradEnabled;    ///< torch.is_grad_enabled
  PyObject* setGradEnabledCm; ///< torch.set_grad_enabled (function and context manager)
  PyObject* getRngState;      ///< torch.get_rng_state
  PyObject* setRngState;      ///< torch.set_rng_state
  PyObject* operatorModule;   ///< operator
  PyObject* getitem;          ///< operator.getitem
  PyObject* builtinsModule;   ///< builtins
  PyObject* metaDevice;       ///< torch.device("meta")
  PyObject* functionType;     ///< types.FunctionType
  PyObject* methodType;       ///< types.MethodType
  PyObject* moduleTypeType;   ///< types.ModuleType
  PyObject* orderedDictType;  ///< collections.OrderedDict
};

/// The table, filled on first use (imports torch). Throws PythonError when an import fails.
const TorchApi& torchApi();

bool isTensor(PyObject* o);
bool isModule(PyObject* o);
/// A meta tensor with the sizes, strides, dtype and requires_grad of `t` (new ref).
PyObjectRef metaExample(PyObject* t);
/// Where a Python callable is defined: "torch.nn.functional", "builtins", "mymodel", ... ("" if
/// unknown).
std::string moduleOf(PyObject* callable);
/// True for callables that become graph nodes: torch functions, torch.nn.functional, Tensor
/// methods, and other functions defined inside the torch package (not nn.Module code, which is
/// inlined, nor the few torch helpers that the interpreter evaluates itself).
bool isTorchOp(PyObject* callable);
/// The operator-module function for a BINARY_OP argument (NB_ADD ...), in-place forms for the
/// inplace variants; borrowed. `name` receives e.g. "add" / "iadd".
PyObject* binaryOperator(int nbOp, std::string* name);
/// A callable's __name__ ("" when it has none).
std::string callableName(PyObject* callable);
/// True for contextlib.nullcontext and torch.autograd.profiler.record_function: context managers
/// whose entering and leaving change nothing a graph sees.
bool isNoOpContextManagerClass(PyObject* cls);
/// True when a dict subclass changes how it behaves as a mapping in Python code (__setitem__,
/// keys, update, ... defined by a class of its own): such dicts are opaque objects to the tracer.
bool overridesMapping(PyTypeObject* type);
/// operator.lt, operator.eq ... for COMPARE_OP index 0..5; borrowed.
PyObject* compareOperator(int cmpIndex);

}  // namespace dynamo::core::interp
