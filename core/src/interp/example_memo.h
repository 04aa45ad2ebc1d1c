// A per-process memo of the example results of torch calls (context.cpp exampleResult).
//
// Capture runs every torch call on meta tensors for the metadata of its result. On torch 2.x many
// of those meta kernels are Python (torch._refs and the decompositions: batch_norm ~2 ms, relu or
// add 0.2-0.6 ms a call), and a model repeats the same call on the same shapes many times
// (resnet18: 20 batch_norm calls, 5 different). The memo keys a call by the callable, every
// argument's example (a tensor: type, sizes, strides, offset, dtype, requires_grad; a constant:
// type and repr) and the global state a meta kernel reads (grad mode, default dtype), and keeps
// only results that are plain fresh tensors (exact torch.Tensor on meta, not a view, offset 0,
// no autograd, not complex); a hit makes a new meta tensor with the same sizes, strides and dtype.
// An in-place op (mobilenet_v2's 35 hardtanh_, each a Python clamp on meta) is kept when it
// returned an argument whose metadata it left unchanged; a hit returns that argument.
// Calls it cannot key (another argument type, a named tensor, an out= argument, autocast or
// inference mode in play) run as before.
#pragma once

#include <Python.h>

#include <string>

#include "dynamo/core/graph_pyref.h"

namespace dynamo::core::interp {

/// The memo key of calling the function `fn` (borrowed; with `method`, torch.Tensor's attribute of
/// that name, called on the first example: a hit needs the same object) with the examples `args` (a tuple, self first for a method) and
/// `kwargs` (a dict) with grad mode `grad`; "" when the call cannot be memoized. Never raises.
std::string exampleMemoKey(PyObject* fn, const std::string& method, PyObject* args, PyObject* kwargs, bool grad);
/// The result memoized under `key` for `fn` with the examples `args` (new ref): a new meta tensor
/// like the one stored, or the argument an in-place op returned; null on a miss.
PyObjectRef exampleMemoLookup(const std::string& key, PyObject* fn, PyObject* args);
/// Records `result` of the call keyed `key` (exampleMemoKey's other arguments again) when it is a
/// plain fresh meta tensor (see above), or one of `args` whose metadata the call left as it was
/// (an in-place op). Never raises.
void exampleMemoStore(const std::string& key, PyObject* fn, const std::string& method, PyObject* result,
                      PyObject* args, PyObject* kwargs, bool grad);

/// Forgets every entry (dynamo.reset(): the entries keep their functions alive).
void exampleMemoClear();

}  // namespace dynamo::core::interp
