// Values of the symbolic interpreter: what a stack slot or a local holds while a frame is traced.
//
// A Value is either known exactly (a constant, a module, a function, a Python object reached
// from the frame through a Source) or symbolic (a tensor produced by a graph node), or a
// container of Values (tuple, list, dict, slice, iterator). Values are shared by pointer: Python
// identity of mutable containers built during tracing is pointer identity of their Value.
//
//   kind        what it stands for                      fields used
//   kConst      int/float/bool/str/None/dtype/...       obj
//   kTensor     a tensor, graph node + meta example     obj (meta example), source,
//                                                         as<TensorData>(): node, device, exact
//                                                         type, symbolic sizes, constant value
//   kTuple      tuple (also namedtuple, torch.Size:      items, obj (the class, or null)
//               obj = class)
//   kList       list                                     items, source (when from the frame)
//   kDict       dict with constant keys                  keys, items, source
//   kSlice      slice(start, stop, step)                 items
//   kNull       the NULL pushed before calls (3.11)      -
//   kObject     any Python object known exactly          obj, source (modules, functions, ...)
//   kFunction   a function made during tracing           obj (code), items (defaults), name (qualname),
//                                                         as<FunctionData>(): globals, closure, kwdefaults
//   kMethod     bound method: self + function             self, obj (function)
//   kTensorAttr tensor method not yet called: x.view      self (tensor), name
//   kCell       a cell (closure variable)                 as<CellData>(): box, slot
//   kIterator   iterator over a known sequence, or       items (a snapshot), as<IteratorData>():
//               pulled lazily                             the live list, position, watched dict, lazy
//   kGradMode   a grad-mode/autocast/inference-mode      as<GradModeData>(): role, mode, restore;
//               manager, or its __enter__/__exit__        obj (autocast: the torch.autocast object)
//   kLazy       a root-frame value not looked at yet      obj (the object), source
//   kSymInt     a Python int known only symbolically       as<SymIntData>(): expr, node (its run-time
//               (dynamic shapes, sym_values.cpp)           value in the graph); obj (example), source
//   kSymFloat   a Python float known only at run time      as<SymFloatData>(): node (its run-time
//               (a learning rate; sym_values.cpp)          value in the graph), roots, finite;
//                                                          obj (example), source
// The graph node of any of these three: graphNode().
//
// Kind data (docs/capture.md "Value kinds"): a kind whose fields mean nothing to the others
// keeps them in a struct of its own inside `data` (a std::variant), read through as<T>(), which
// checks the kind; a value is made with its data (makeCell, makeTensor). Kinds with data:
// kCell (CellData), kGradMode (GradModeData), kIterator (IteratorData), kFunction
// (FunctionData), kSymInt (SymIntData), kSymFloat (SymFloatData), kTensor (TensorData). The
// others use the shared fields below, each commented with the kinds that read it.
//
// kLazy exists only in the root Tracer's locals and stack: the object is wrapped (and guarded)
// when an instruction first consumes it, so values that only pass through the frame (arguments
// never read, a resume function's stack values handed straight to the breaking call) add no
// guards and cause no recompiles. `x.shape` / `x.size()` of a tensor with dynamic sizes is a
// kTuple whose obj is torch.Size and whose items are symbolic ints (sym_values.h symbolicShape).
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "dynamo/common/error.h"
#include "dynamo/core/graph.h"
#include "dynamo/core/graph_pyref.h"
#include "dynamo/core/source.h"
#include "dynamo/core/symbolic.h"

namespace dynamo::core::interp {

struct Value;
using ValueRef = std::shared_ptr<Value>;

enum class ValueKind {
  kConst,
  kTensor,
  kTuple,
  kList,
  kDict,
  kSlice,
  kNull,
  kObject,
  kFunction,
  kMethod,
  kTensorAttr,
  kCell,
  kIterator,
  kGradMode,
  kLazy,
  kSymInt,
  kSymFloat,
};

/// A cell's contents; shared by every function that closes over it.
struct CellBox {
  ValueRef contents;  ///< null when the cell is empty
  bool external = false;  ///< a real cell of a function from outside the trace
  int rootSlot = -1;      ///< the root frame's slot holding this cell, when it has one
};

/// kCell's data: which box the cell shares and where it lives.
struct CellData {
  std::shared_ptr<CellBox> box;  ///< the contents, shared by every closure over the cell
  int slot = -1;                 ///< the frame's local slot that holds the cell
};

/// kGradMode's data: a context manager the tracer enters and leaves itself (torch.no_grad(),
/// enable_grad(), set_grad_enabled(mode), a manager that changes nothing, torch.autocast(...),
/// torch.inference_mode(mode)), or the __enter__ / __exit__ callable a `with` pushes for one.
struct GradModeData {
  enum class Role {
    kGradMode,        ///< no_grad() / enable_grad(): sets `mode` on entry
    kNoOp,            ///< nullcontext(), record_function(...), autocast that changes nothing
    kSetGradEnabled,  ///< set_grad_enabled(mode): switched already; `restore` is the mode before
    kAutocast,        ///< torch.autocast(...): the Value's obj is the autocast object
    kInferenceMode,   ///< inference_mode(mode): `mode` is the inference mode it sets
    kEnter,           ///< a grad-mode manager's __enter__: sets grad mode `mode`
    kExit,            ///< a grad-mode manager's __exit__: restores grad mode `mode`
    kNoOpExit,        ///< a no-op manager's __exit__
    kAutocastExit,    ///< an autocast block's __exit__
    kInferenceExit,   ///< an inference-mode block's __exit__: grad mode `mode`, inference mode `restore`
  };
  Role role = Role::kGradMode;
  bool mode = false;     ///< the grad (kInferenceMode: inference) mode it sets or restores
  bool restore = false;  ///< kSetGradEnabled: grad mode to restore; kInferenceExit: inference mode to restore
};

struct LazyIterator;  // call_constructs.h

/// kIterator's data. An iterator over known items walks the Value's `items` (a snapshot) or,
/// over a list, the list itself (live: it sees items the loop appends or removes); a lazy one
/// pulls its items on demand (a generator being traced, or zip/enumerate/map/filter over one).
struct IteratorData {
  ValueRef list;          ///< the list a live iterator walks; null otherwise
  size_t position = 0;    ///< the next item's position (iterators over known items)
  ValueRef watched;       ///< an iterator over a dict (or a set made in the trace): the dict, whose
  size_t watchedSize = 0; ///< size (its size when iteration began) must not change
  std::shared_ptr<LazyIterator> lazy;  ///< a lazy iterator's source (call_constructs.h); null otherwise
};

/// kFunction's data: what a function made during tracing (MAKE_FUNCTION) closes over. Its code
/// stays in the Value's obj, its positional defaults in `items` (walked like a container's, so
/// a tensor default is seen where tensors are looked for) and its qualname in `name`.
struct FunctionData {
  PyObjectRef globals;  ///< the globals dict of the module that made it
  std::vector<std::shared_ptr<CellBox>> closure;  ///< its closure cells, in co_freevars order
  ValueRef kwdefaults;  ///< keyword-only defaults (a kDict), or null
};

/// kSymInt's data (sym_values.cpp): the int's value as an expression of the compile's symbols.
/// Its example value stays in the Value's obj.
struct SymIntData {
  sym::Expr expr;
  NodeRef node;  ///< the graph node giving its run-time value
};

/// kSymFloat's data (sym_values.cpp). Its example value stays in the Value's obj.
struct SymFloatData {
  NodeRef node;  ///< the graph node giving its run-time value
  /// The symbolic inputs it was computed from (kSymFloat inputs, kSymInt values), to specialise
  /// when its value is needed; empty for a float input (its own root).
  std::vector<ValueRef> roots;
  bool finite = false;  ///< known to be a finite float (computed from ints and moderate constants)
};

/// kTensor's data. Its meta example (sizes, strides, dtype on the meta device) stays in the
/// Value's obj, where it came from in the frame in `source`.
struct TensorData {
  NodeRef node;           ///< the graph node producing it
  PyObjectRef device;     ///< the real torch.device (meta examples lose it)
  PyObjectRef exactType;  ///< a graph input: its exact type (Tensor or Parameter); null otherwise
  /// With dynamic dimensions: one size expression per dimension (constants for static ones);
  /// empty when every size is static (the example's sizes are then exact).
  std::vector<sym::Expr> symSizes;
  /// Made by a torch factory from Python constants only (torch.tensor(3)) and not yet passed to
  /// any op: its real value, so item()/tolist()/int() on it are constants (call_constructs.cpp).
  /// Null otherwise.
  PyObjectRef constValue;
};

/// The kind-specific data of a Value: std::monostate for the kinds that have none.
using KindData = std::variant<std::monostate, CellData, GradModeData, IteratorData, FunctionData, SymIntData,
                              SymFloatData, TensorData>;

/// The kind a KindData alternative belongs to.
template <typename T> struct KindOf;
template <> struct KindOf<CellData> { static constexpr ValueKind kind = ValueKind::kCell; };
template <> struct KindOf<GradModeData> { static constexpr ValueKind kind = ValueKind::kGradMode; };
template <> struct KindOf<IteratorData> { static constexpr ValueKind kind = ValueKind::kIterator; };
template <> struct KindOf<FunctionData> { static constexpr ValueKind kind = ValueKind::kFunction; };
template <> struct KindOf<SymIntData> { static constexpr ValueKind kind = ValueKind::kSymInt; };
template <> struct KindOf<SymFloatData> { static constexpr ValueKind kind = ValueKind::kSymFloat; };
template <> struct KindOf<TensorData> { static constexpr ValueKind kind = ValueKind::kTensor; };

/// A kind's name for messages ("cell", "tensor").
const char* valueKindName(ValueKind kind);

struct Value {
  ValueKind kind = ValueKind::kConst;
  PyObjectRef obj;               ///< the constant / object / meta example / function code
  PyObjectRef real;              ///< kList/kDict: the real container it stands for, when it is one
  Source source;                 ///< where it came from in the frame, when it did
  std::vector<ValueRef> items;   ///< container elements / slice parts / defaults
  std::vector<PyObjectRef> keys; ///< kDict: constant keys, parallel to items
  ValueRef self;                 ///< kMethod / kTensorAttr: the receiver; kDict of a
                                 ///< collections.defaultdict made in the trace: default_factory
  std::string name;              ///< kTensorAttr: method name; kFunction: qualname
  bool mutated = false;          ///< kList/kDict with a source: changed during tracing
  bool idGuarded = false;        ///< kObject: its identity is guarded (ID_MATCH on its source)
  KindData data;                 ///< the data of a kind that has its own (see KindData)

  /// The data of this value's kind; an internal error when the value is of another kind.
  template <typename T>
  T& as() {
    T* d = std::get_if<T>(&data);
    DYNAMO_INTERNAL_ASSERT(kind == KindOf<T>::kind && d != nullptr, "a ", valueKindName(kind),
                           " value used as a ", valueKindName(KindOf<T>::kind));
    return *d;
  }
  template <typename T>
  const T& as() const { return const_cast<Value*>(this)->as<T>(); }

  bool isConst() const { return kind == ValueKind::kConst; }
  bool isTensor() const { return kind == ValueKind::kTensor; }
  bool isNull() const { return kind == ValueKind::kNull; }
  bool isSymInt() const { return kind == ValueKind::kSymInt; }
  bool isSymFloat() const { return kind == ValueKind::kSymFloat; }
  /// A Python number known only at run time (kSymInt or kSymFloat).
  bool isSymScalar() const { return isSymInt() || isSymFloat(); }
  /// The graph node giving the run-time value of a kTensor, kSymInt or kSymFloat; an internal
  /// error for another kind.
  const NodeRef& graphNode() const;
  /// A list or dict that exists outside the trace (read from the frame or through objects): its
  /// mutations are side effects to replay on it.
  bool external() const { return static_cast<bool>(source) || static_cast<bool>(real); }
  /// Borrowed ref to the Python object of a kConst/kObject value.
  PyObject* py() const { return obj.get(); }
};

/// An iterator over `v`'s items: over a list it is live (it sees items the loop appends or
/// removes, as a Python list iterator does); over anything else, over a snapshot of its items.
ValueRef makeIterator(const ValueRef& v, std::vector<ValueRef> snapshot);
/// The items an iterator walks (the list's current items for a live one).
const std::vector<ValueRef>& iteratorItems(const Value& it);
/// An iterator whose items are pulled on demand from `lazy` (call_constructs.h).
ValueRef makeLazyIterator(std::shared_ptr<LazyIterator> lazy);

/// Constructors. `o` is a borrowed ref (a new reference is kept).
ValueRef makeConst(PyObject* o);
ValueRef makeObject(PyObject* o, Source source = {});
ValueRef makeNull();
ValueRef makeTuple(std::vector<ValueRef> items);
ValueRef makeList(std::vector<ValueRef> items);
ValueRef makeSlice(ValueRef start, ValueRef stop, ValueRef step);
ValueRef makeTensor(NodeRef node, PyObjectRef example, PyObjectRef device, Source source = {});
/// A cell in local `slot`, sharing `box` (a new, empty box when null).
ValueRef makeCell(std::shared_ptr<CellBox> box, int slot);
/// A function made during tracing from `code` (a borrowed ref), its positional defaults and qualname.
ValueRef makeFunction(PyObject* code, std::vector<ValueRef> defaults, std::string qualname, FunctionData data);
/// A grad-mode manager or its __enter__/__exit__ (see GradModeData).
ValueRef makeGradMode(GradModeData data);
/// A root-frame object not wrapped yet (see kLazy). `o` is borrowed.
ValueRef makeLazy(PyObject* o, Source source);

/// True for Python objects that can live in a kConst: None, bool, int, float, complex, str,
/// bytes, Ellipsis, torch.dtype/device/layout/memory_format, and tuples/frozensets (and
/// torch.Size) of those.
bool isConstantObject(PyObject* o);

/// Whether `v` is a tensor or holds one among its items, at any depth (a container, a slice, a
/// function's defaults).
bool containsTensor(const ValueRef& v);

/// A short description for break messages: "tensor", "int 3", "list of 2", "module Linear".
std::string describe(const Value& v);

}  // namespace dynamo::core::interp
