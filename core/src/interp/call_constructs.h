// Calls of real model code that the generic call machinery (tracer_calls.cpp) would break on,
// each captured the way eager runs it (call_constructs.cpp; docs/capture.md, "Constructs"):
//
//   Fn.apply(*args) of a torch.autograd.Function    one graph node calling Fn.apply, so autograd
//                                                   runs the user's backward; the forward is traced
//                                                   first in a scratch context (it must be
//                                                   traceable, and it gives the output shapes)
//   nn.Softmax(dim=1)(x), nn.ReLU()(x) in forward   torch.nn's own modules without parameters or
//                                                   buffers, built now from constants; the call is
//                                                   then inlined like any module call
//   torch.autograd.Variable(t, requires_grad=b)     t.detach() (.requires_grad_(b)), as in eager
//   torch.FloatTensor(2, 3), torch.Tensor([1, 2])   torch.empty(sizes, dtype=...) /
//                                                   torch.tensor(data, dtype=...)
//   x.new(2, 3), x.new(x.size()), x.new([1, 2])     x.new_empty(sizes) / x.new_tensor(data)
//   a module with forward (pre-)hooks               nn.Module.__call__ itself inlined: it runs the
//                                                   hooks around forward, and its reads of the hook
//                                                   dicts guard them (a hook added or removed
//                                                   recompiles); backward hooks still break
//   s = set(); s.add(k); k in s; {..} literals,      a real set made during the trace (kObject named
//   set comprehensions, s.update(...), a | b        kTraceSet): its members are constants or objects
//                                                   known exactly, so iteration follows the real
//                                                   set's order (hash order, as in eager); each
//                                                   member keeps the Value it was added as
//   generators made in the function                 run lazily: each value is traced when the
//   (for, next, zip, enumerate, list over them),    consumer asks for it, so the generator's code
//   map() and filter() of values not all constant   and the consumer's interleave as in Python
//   np.sqrt(d), np.prod(x.shape), np.floor(n / 2)   numpy's ufuncs and pure reductions on constants
//                                                   evaluated now (a numpy scalar passes to torch
//                                                   as the number it is, as torch takes it)
//   self.layers[1:3] (ModuleList, Sequential)       the new container made now; its members are
//                                                   the original's, reached through its source
//   collections.defaultdict(list) made in the       a dict Value whose missing keys call the
//   function                                        factory (as __missing__ does)
//   torch.tensor(3).item(), int(torch.tensor(n))    constants: a tensor made by a factory from
//                                                   Python constants (or by operator arithmetic on
//                                                   such tensors) carries its real value until
//                                                   another op sees it (Value::constValue)
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tracer.h"

namespace dynamo::core::interp {

/// `fn(*args, **kwargs)` when fn is one of the constructs above; null otherwise (the caller goes
/// on with the generic call). Throws GraphBreak where the construct cannot be captured.
ValueRef callConstruct(Tracer& tr, const ValueRef& fn, std::vector<ValueRef>& args,
                       std::vector<std::pair<std::string, ValueRef>>& kwargs);

/// The torch.autograd.Function subclass whose apply `fn` is (borrowed), or null: torch 1.13's
/// builtin apply bound to the class, or torch 2.x's Python classmethod around it.
PyObject* autogradFunctionOf(PyObject* fn);

/// Value::name of objects made during the trace that the graph's code cannot hand out anew on
/// each call (a set, a module made in forward): codegen breaks when one outlives the graph.
inline constexpr const char kMadeInTrace[] = "__made_in_trace__";

/// True for a set made during the trace (see above).
bool isTraceSet(const Value& v);
/// A set Value for the real set `set` (new or folded from constants); members from `members`
/// (by identity) keep their Values, the others become constants. `set` is borrowed.
ValueRef makeTraceSet(PyObject* set, const std::vector<ValueRef>& members = {});
/// BUILD_SET: a set of these items. Throws GraphBreak when one is not known exactly (a tensor).
ValueRef buildSet(CompileContext& ctx, const std::vector<ValueRef>& items);
/// SET_ADD / SET_UPDATE on a set being built.
void setAdd(CompileContext& ctx, const ValueRef& set, const ValueRef& item);
void setUpdate(CompileContext& ctx, const ValueRef& set, const ValueRef& iterable);
/// set() / set(iterable): a trace set (call_sets.cpp); null for other argument counts.
ValueRef setFromIterable(CompileContext& ctx, const std::vector<ValueRef>& args);
/// The members of a trace set in the real set's iteration order.
std::vector<ValueRef> setMembers(const ValueRef& set);
/// `set op= other` (|=, &=, -=, ^=) on a trace set: the real in-place operator `fn` ("ior" ...)
/// on the real set; returns `set` itself.
ValueRef setInPlaceOperator(CompileContext& ctx, const ValueRef& set, const ValueRef& other, PyObject* fn,
                            const std::string& name);
/// `set.name(*args)` on a trace set (add, discard, update, union, ...); null when self is no set.
ValueRef callSetMethod(Tracer& tr, const ValueRef& self, const std::string& name, std::vector<ValueRef>& args,
                       std::vector<std::pair<std::string, ValueRef>>& kwargs);

/// An iterator pulled on demand (Value::lazy).
struct LazyIterator {
  std::function<ValueRef(bool* exhausted)> pull;  ///< the next item, or null with *exhausted set
  bool exhausted = false;                         ///< stays exhausted, as Python iterators do
  ValueRef returned;  ///< a generator's return value once exhausted (`x = yield from g()`); null: None
};
/// The iterator of a generator being traced: each pull resumes `tracer` to its next yield.
ValueRef makeGeneratorIterator(std::unique_ptr<Tracer> tracer);
/// The next item of an iterator Value (lazy or over known items) into *out; false when exhausted.
bool nextItem(const ValueRef& it, ValueRef* out);

/// True when an argument is a lazy iterator (a generator made in the function).
bool anyLazy(const std::vector<ValueRef>& args);
/// zip(...) / enumerate(...) over a lazy iterator: lazy too, pulling its arguments in Python's
/// order (call_lazy.cpp); null when the arguments are not supported.
ValueRef lazyZipOrEnumerate(CompileContext& ctx, bool isZip, const std::vector<ValueRef>& args,
                            const std::vector<std::pair<std::string, ValueRef>>& kwargs);
/// map(f, ...) / filter(f, ...) of values not all constant: a lazy iterator calling f per item.
ValueRef lazyMapOrFilter(CompileContext& ctx, bool isMap, const std::vector<ValueRef>& args,
                         const std::vector<std::pair<std::string, ValueRef>>& kwargs);

/// `layers[1:3]` of a ModuleList or Sequential: the new container, made now (a module made in the
/// trace); its members are the original's Values (with their sources and guards).
ValueRef sliceModuleContainer(CompileContext& ctx, const ValueRef& container, PyObject* slice);

/// d[key] of a collections.defaultdict made in the trace when key is missing: default_factory()
/// stored under key and returned; null for other dicts.
ValueRef defaultDictMissing(CompileContext& ctx, const ValueRef& dict, const PyObjectRef& key);

/// `module(*args, **kwargs)` of a module with hooks (tracer_calls.cpp's callModule finds them).
ValueRef callModuleWithHooks(Tracer& tr, const ValueRef& module, std::vector<ValueRef> args,
                             std::vector<std::pair<std::string, ValueRef>> kwargs);

/// `self.name(*args, **kwargs)` on a tensor when it is one of the constructs above (x.new(...),
/// item()/tolist() of a tensor made from constants); null otherwise.
ValueRef callTensorConstruct(Tracer& tr, const ValueRef& self, const std::string& name,
                             std::vector<ValueRef>& args,
                             std::vector<std::pair<std::string, ValueRef>>& kwargs);

}  // namespace dynamo::core::interp
