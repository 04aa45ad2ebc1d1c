// Lazy iterators (see call_constructs.h): generators made in the function, and zip, enumerate,
// map and filter over them, pulled one value at a time as the consumer asks, so the generator's
// code and the consumer's interleave as in Python.
#include "call_constructs.h"

namespace dynamo::core::interp {

using Kw = std::vector<std::pair<std::string, ValueRef>>;

// ---- generators ------------------------------------------------------------------------------

ValueRef makeGeneratorIterator(std::unique_ptr<Tracer> tracer) {
  ValueRef it = makeLazyIterator(std::make_shared<LazyIterator>());
  LazyIterator& source = *it->as<IteratorData>().lazy;
  std::shared_ptr<Tracer> gen(std::move(tracer));
  LazyIterator* lazy = &source;  // owns the lambda, so it outlives every pull
  source.pull = [gen, lazy](bool* exhausted) -> ValueRef {
    try {
      ValueRef v = gen->resume(exhausted);
      if (*exhausted) lazy->returned = gen->returnedValue();
      return v;
    } catch (GraphBreak& b) {
      b.inlined = true;  // nodes of the generator's code may be in the graph: restart
      throw;
    }
  };
  return it;
}

bool nextItem(const ValueRef& it, ValueRef* out) {
  IteratorData& data = it->as<IteratorData>();
  if (data.lazy) {
    if (data.lazy->exhausted) return false;
    bool exhausted = false;
    ValueRef v = data.lazy->pull(&exhausted);
    if (exhausted) {
      data.lazy->exhausted = true;
      return false;
    }
    *out = std::move(v);
    return true;
  }
  const std::vector<ValueRef>& items = iteratorItems(*it);
  if (data.position >= items.size()) return false;
  *out = items[data.position++];
  return true;
}

bool anyLazy(const std::vector<ValueRef>& args) {
  for (const ValueRef& a : args)
    if (a->kind == ValueKind::kIterator && a->as<IteratorData>().lazy) return true;
  return false;
}

namespace {

// The arguments of zip / enumerate / map / filter as iterators (an iterator stays as it is).
void asIterators(CompileContext& ctx, std::vector<ValueRef>& parts) {
  for (ValueRef& p : parts)
    if (p->kind != ValueKind::kIterator)
      p = makeIterator(p, p->kind == ValueKind::kList ? std::vector<ValueRef>{} : iterateValue(ctx, p));
}

// The next item of each iterator, pulled in order; false as soon as one is exhausted.
bool nextOfEach(const std::vector<ValueRef>& parts, std::vector<ValueRef>* items) {
  for (const ValueRef& p : parts) {
    ValueRef v;
    if (!nextItem(p, &v)) return false;
    items->push_back(v);
  }
  return true;
}

}  // namespace

// zip(...) / enumerate(...) over a generator: lazy too, pulling their arguments in Python's order.
ValueRef lazyZipOrEnumerate(CompileContext& ctx, bool isZip, const std::vector<ValueRef>& args, const Kw& kwargs) {
  std::vector<ValueRef> parts;
  long start = 0;
  if (isZip) {
    if (!kwargs.empty()) return nullptr;  // zip(strict=...)
    parts = args;
  } else {
    ValueRef startV = args.size() > 1 ? args[1] : nullptr;
    for (const auto& [k, v] : kwargs)
      if (k == "start") startV = v;
    if (args.empty() || args.size() > 2 || (startV && (!startV->isConst() || !PyLong_Check(startV->py())))) return nullptr;
    start = startV ? PyLong_AsLong(startV->py()) : 0;
    parts = {args[0]};
  }
  asIterators(ctx, parts);
  ValueRef it = makeLazyIterator(std::make_shared<LazyIterator>());
  LazyIterator& source = *it->as<IteratorData>().lazy;
  auto index = std::make_shared<long>(start);
  source.pull = [parts, isZip, index](bool* exhausted) -> ValueRef {
    std::vector<ValueRef> items;
    if (!nextOfEach(parts, &items)) {
      *exhausted = true;
      return nullptr;
    }
    if (isZip) return makeTuple(std::move(items));
    PyObjectRef i = PyObjectRef::steal(checkPy(PyLong_FromLong((*index)++)));
    return makeTuple({makeConst(i.get()), items[0]});
  };
  return it;
}

// map(f, *iterables) / filter(f, iterable) over values that are not all constants: lazy, as in
// Python, each call of f traced when the consumer asks for the next value (from the code running
// then: the innermost Tracer on the context's stack).
ValueRef lazyMapOrFilter(CompileContext& ctx, bool isMap, const std::vector<ValueRef>& args, const Kw& kwargs) {
  if (!kwargs.empty() || args.size() < 2 || (!isMap && args.size() != 2)) return nullptr;
  ValueRef fn = args[0];
  std::vector<ValueRef> parts(args.begin() + 1, args.end());
  asIterators(ctx, parts);
  ValueRef it = makeLazyIterator(std::make_shared<LazyIterator>());
  LazyIterator& source = *it->as<IteratorData>().lazy;
  CompileContext* c = &ctx;  // outlives every Value of the compile
  source.pull = [c, fn, parts, isMap](bool* exhausted) -> ValueRef {
    Tracer& current = const_cast<Tracer&>(*c->tracers.back());
    while (true) {
      std::vector<ValueRef> items;
      if (!nextOfEach(parts, &items)) {
        *exhausted = true;
        return nullptr;
      }
      if (isMap) return callValue(current, fn, std::move(items), {});
      // filter(None, xs) keeps the truthy items; filter(f, xs) those for which f is truthy.
      ValueRef keep = fn->isConst() && fn->py() == Py_None ? items[0] : callValue(current, fn, {items[0]}, {});
      PyObjectRef k = concrete(keep);
      if (!k || keep->isTensor())
        c->breakHere(BreakKind::kDataDependentBranch, "filter() on a value that is not known while capturing");
      int truth = PyObject_IsTrue(k.get());
      if (truth < 0) throw PythonError{};
      if (truth) return items[0];
    }
  };
  return it;
}

}  // namespace dynamo::core::interp
