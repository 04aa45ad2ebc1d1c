// The interpreter loop: one handler per opcode over symbolic Values (see tracer.h).
//
// Opcodes not handled here raise a kUnsupportedBytecode graph break naming the opcode. Version
// differences (3.11 PRECALL/LOAD_METHOD/POP_JUMP_FORWARD_*, 3.12 RETURN_CONST/END_FOR/LOAD_ATTR
// method bit) are handled with #ifdef on the opcode macros of the Python being built against.
#include "tracer.h"
#include "call_constructs.h"

#include <utility>

#include <opcode.h>

#include "autocast.h"
#include "codegen.h"
#include "dynamic.h"
#include "inference_mode.h"
#include "sym_values.h"
#include "torch_api.h"

namespace dynamo::core::interp {

namespace bc = dynamo::core::bytecode;

// ---- break kinds ------------------------------------------------------------------------------

namespace {
struct BreakRow {
  const char* slug;
  const char* explanation;
  const char* hint;
};
const BreakRow kBreakRows[] = {
#define DYNAMO_BREAK(Name, slug, explanation, hint) {slug, explanation, hint},
#include "dynamo/core/break_kinds.def"
#undef DYNAMO_BREAK
};
}  // namespace

const char* breakSlug(BreakKind kind) { return kBreakRows[static_cast<int>(kind)].slug; }
const char* breakExplanation(BreakKind kind) {
  return kBreakRows[static_cast<int>(kind)].explanation;
}
const char* breakHint(BreakKind kind) { return kBreakRows[static_cast<int>(kind)].hint; }

// ---- construction -----------------------------------------------------------------------------

static std::vector<std::string> slotNames(PyCodeObject* code) {
  bc::CodeOptions opts = bc::codeOptionsFrom(code);
  return opts.localsPlusNames();
}

Tracer::Tracer(CompileContext& ctx, PyCodeObject* code, PyObject* globals, PyObject* builtins)
    : ctx_(ctx), parent_(nullptr), code_(code), globals_(globals), builtins_(builtins) {
  bc_ = bc::decode(code);
  localNames_ = slotNames(code);
  locals_.resize(localNames_.size());
  initRootLocals();
}

Tracer::Tracer(CompileContext& ctx, Tracer& parent, PyCodeObject* code, PyObject* globals,
               std::vector<ValueRef> locals, std::vector<std::shared_ptr<CellBox>> closure)
    : ctx_(ctx),
      parent_(&parent),
      code_(code),
      globals_(globals),
      builtins_(parent.builtins_),
      locals_(std::move(locals)),
      closure_(std::move(closure)),
      depth_(parent.depth_ + 1) {
  bc_ = bc::decode(code);
  localNames_ = slotNames(code);
  locals_.resize(localNames_.size());
  // The inlined function's globals may differ from the root's; builtins come from its globals.
  PyObject* b = PyDict_GetItemString(globals_, "__builtins__");  // borrowed ref
  if (b != nullptr) {
    if (PyModule_Check(b)) b = PyModule_GetDict(b);  // borrowed ref
    if (PyDict_Check(b)) builtins_ = b;
  }
}

void Tracer::initRootLocals() {
  const FrameValues& f = ctx_.frame();
  // Guards on the arguments are created by the function's signature: its `def` line.
  bc::Instruction defLine;
  defLine.pos.line = code_->co_firstlineno;
  ctx_.userStack.push_back(locationOf(defLine));
  for (int i = 0; i < static_cast<int>(locals_.size()) && i < f.nlocals; ++i) {
    PyObject* v = f.locals[i];  // borrowed ref
    if (v == nullptr) continue;
    if (preCelled(i)) {
      // A resume function gets the parent's cells themselves in these argument slots.
      ValueRef cell = makeCell(nullptr, i);
      const std::shared_ptr<CellBox>& box = cell->as<CellData>().box;
      PyObject* contents = PyCell_Check(v) ? PyCell_GET(v) : nullptr;  // borrowed ref
      box->rootSlot = i;
      ctx_.cellBoxes[v] = box;
      if (contents != nullptr)
        box->contents = ctx_.wrap(contents, Source::attr(Source::local(i, localNames_[i]), "cell_contents"));
      locals_[i] = cell;
      continue;
    }
    locals_[i] = makeLazy(v, Source::local(i, localNames_[i]));
  }
  ctx_.userStack.pop_back();
}

const ValueRef& Tracer::realize(ValueRef& v) {
  if (v && v->kind == ValueKind::kLazy) {
    auto it = realized_.find(v.get());
    if (it == realized_.end()) {
      // Guards on the value are created by the line that first uses it; a resume function's
      // stack value was computed by the line of the break that made it, which is what it blames.
      const ResumeInfo* info = v->source.name().rfind("___stack", 0) == 0 ? resumeInfo(code_) : nullptr;
      SourceLocation saved = ctx_.userStack.empty() ? SourceLocation{} : ctx_.userStack.back();
      if (info != nullptr && info->breakAt.known() && !ctx_.userStack.empty()) ctx_.userStack.back() = info->breakAt;
      ValueRef w = ctx_.wrap(v->obj.get(), v->source);
      if (!ctx_.userStack.empty()) ctx_.userStack.back() = saved;
      it = realized_.emplace(v.get(), std::move(w)).first;
      lazyKeep_.push_back(v);
    }
    v = it->second;
  }
  return v;
}

bool Tracer::preCelled(int slot) const {
  const ResumeInfo* info = resumeInfo(code_);
  if (info == nullptr) return false;
  for (int s : info->preCelledSlots)
    if (s == slot) return true;
  return false;
}

ValueRef Tracer::zeroArgSuper() {
  int classSlot = -1;
  for (size_t i = 0; i < localNames_.size(); ++i)
    if (localNames_[i] == "__class__") classSlot = static_cast<int>(i);
  // The receiver is the first argument; in a resume function it sits after the stack values.
  int selfSlot = code_->co_argcount > 0 ? 0 : -1;
  if (const ResumeInfo* info = resumeInfo(code_)) {
    selfSlot = -1;
    for (size_t i = 0; i < localNames_.size(); ++i)
      if (!info->firstArgName.empty() && localNames_[i] == info->firstArgName) selfSlot = static_cast<int>(i);
  }
  if (classSlot < 0 || selfSlot < 0 || !locals_[classSlot] || !locals_[selfSlot])
    ctx_.breakHere(BreakKind::kUnsupported, "super() outside a method");
  ValueRef cls = realize(locals_[classSlot]);
  if (cls->kind == ValueKind::kCell) cls = cls->as<CellData>().box->contents;
  ValueRef self = realize(locals_[selfSlot]);
  if (self->kind == ValueKind::kCell) self = self->as<CellData>().box->contents;
  if (!cls || cls->kind != ValueKind::kObject || !self || self->kind != ValueKind::kObject)
    ctx_.breakHere(BreakKind::kUnsupported, "super() with a receiver that is not a known object");
  PyObjectRef sup = PyObjectRef::steal(checkPy(
      PyObject_CallFunctionObjArgs((PyObject*)&PySuper_Type, cls->py(), self->py(), nullptr)));
  ValueRef v = makeObject(sup.get());
  v->name = "__super__";
  v->self = self;
  return v;
}

SourceLocation Tracer::locationOf(const bc::Instruction& ins) const {
  // Consecutive instructions mostly share a line: read the source text once per line.
  const int line = ins.pos.line > 0 ? ins.pos.line : 0;
  if (line == lastLine_) return lastLocation_;
  SourceLocation loc;
  PyObject* fn = code_->co_filename;  // borrowed ref
  loc.file = PyUnicode_Check(fn) ? PyUnicode_AsUTF8(fn) : "";
  loc.line = line;
  if (loc.line > 0) {
    static PyObject* linecache = PyImport_ImportModule("linecache");  // new ref, kept
    if (linecache != nullptr) {
      PyObject* text = PyObject_CallMethod(linecache, "getline", "Oi", fn, loc.line);  // new
      if (text != nullptr && PyUnicode_Check(text)) {
        std::string s = PyUnicode_AsUTF8(text);
        size_t b = s.find_first_not_of(" \t");
        size_t e = s.find_last_not_of(" \t\r\n");
        loc.sourceLine = b == std::string::npos ? "" : s.substr(b, e - b + 1);
      }
      Py_XDECREF(text);
    }
    PyErr_Clear();
  }
  lastLine_ = line;
  lastLocation_ = loc;
  return loc;
}

// ---- dict helpers ---------------------------------------------------------------------------

int dictIndex(const ValueRef& d, const PyObjectRef& key) {
  for (size_t k = 0; k < d->keys.size(); ++k) {
    int r = PyObject_RichCompareBool(d->keys[k].get(), key.get(), Py_EQ);
    if (r < 0) throw PythonError{};
    if (r) return static_cast<int>(k);
  }
  return -1;
}

void setDictItem(const ValueRef& d, const PyObjectRef& key, ValueRef value) {
  int i = dictIndex(d, key);
  if (i >= 0) {
    d->items[i] = std::move(value);  // Python keeps the first key object and the position
  } else {
    d->keys.push_back(key);
    d->items.push_back(std::move(value));
  }
}

// ---- stack helpers ----------------------------------------------------------------------------

ValueRef Tracer::popRaw() {
  DYNAMO_INTERNAL_ASSERT(!stack_.empty(), "stack underflow at instruction ", ip_);
  ValueRef v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

ValueRef Tracer::pop() {
  ValueRef v = popRaw();
  realize(v);
  return v;
}

ValueRef& Tracer::top(int n) {
  DYNAMO_INTERNAL_ASSERT(static_cast<int>(stack_.size()) >= n, "stack underflow at ", ip_);
  return const_cast<ValueRef&>(realize(stack_[stack_.size() - n]));
}

std::vector<ValueRef> Tracer::popN(int n) {
  DYNAMO_INTERNAL_ASSERT(static_cast<int>(stack_.size()) >= n, "stack underflow at ", ip_);
  std::vector<ValueRef> out(stack_.end() - n, stack_.end());
  stack_.resize(stack_.size() - n);
  for (ValueRef& v : out) realize(v);
  return out;
}

// ---- the loop ---------------------------------------------------------------------------------

ValueRef Tracer::resume(bool* exhausted) {
  *exhausted = false;
  if (done_) {
    *exhausted = true;
    return nullptr;
  }
  generator_ = true;
  if (!started_) {
    started_ = true;
    if (depth_ > ctx_.options.maxInlineDepth)
      ctx_.breakHere(BreakKind::kUnsupportedCall, "inlining deeper than " + std::to_string(ctx_.options.maxInlineDepth) + " nested calls (recursion)");
    for (size_t i = 0; i < bc_.instructions.size(); ++i) {
      const bc::Instruction& ins = bc_.instructions[i];
      if (ins.isJump() && ins.target >= 0 && ins.target <= static_cast<int>(i))
        loops_.emplace_back(ins.target, static_cast<int>(i));
    }
    ip_ = 0;
  }
  // On top of whichever code pulls the value now (its handlers, its user stack).
  ctx_.userStack.push_back({});
  ctx_.tracers.push_back(this);
  struct Pop {
    CompileContext& ctx;
    ~Pop() {
      ctx.tracers.pop_back();
      ctx.userStack.pop_back();
    }
  } popTracer{ctx_};
  while (!done_) {
    DYNAMO_INTERNAL_ASSERT(ip_ >= 0 && ip_ < static_cast<int>(bc_.instructions.size()),
                           "fell off the end of the bytecode at ", ip_);
    const bc::Instruction& ins = bc_.instructions[ip_];
    ctx_.userStack.back() = locationOf(ins);
    next_ = ip_ + 1;
    step(ins);
    ip_ = next_;
    if (suspended_) {
      suspended_ = false;
      return std::exchange(yielded_, nullptr);
    }
  }
  *exhausted = true;
  return nullptr;
}

ValueRef Tracer::run() {
  // Deep recursion is not unrolled: the outermost call runs as Python (a break at the call).
  if (depth_ > ctx_.options.maxInlineDepth)
    ctx_.breakHere(BreakKind::kUnsupportedCall,
                   "inlining deeper than " + std::to_string(ctx_.options.maxInlineDepth) + " nested calls (recursion)");
  for (size_t i = 0; i < bc_.instructions.size(); ++i) {
    const bc::Instruction& ins = bc_.instructions[i];
    if (ins.isJump() && ins.target >= 0 && ins.target <= static_cast<int>(i))
      loops_.emplace_back(ins.target, static_cast<int>(i));
  }
  ctx_.userStack.push_back({});
  ctx_.tracers.push_back(this);
  struct PopTracer {
    CompileContext& ctx;
    ~PopTracer() { ctx.tracers.pop_back(); }
  } popTracer{ctx_};
  ip_ = 0;
  while (!done_) {
    DYNAMO_INTERNAL_ASSERT(ip_ >= 0 && ip_ < static_cast<int>(bc_.instructions.size()),
                           "fell off the end of the bytecode at ", ip_);
    const bc::Instruction& ins = bc_.instructions[ip_];
    ctx_.userStack.back() = locationOf(ins);
    next_ = ip_ + 1;
    if (parent_ == nullptr) {
      // Root: keep the state before the instruction, for the code after a break.
      std::vector<ValueRef> stackBefore = stack_;
      std::vector<ValueRef> localsBefore = locals_;
      ValueRef kwBefore = kwNames_;
      const size_t guardsBefore = ctx_.guards.size();
      const size_t nodesBefore = ctx_.graph.size();
      const size_t effectsBefore = ctx_.effects.size();
      try {
        auto forced = ctx_.options.forcedBreaks.find(ip_);
        if (forced != ctx_.options.forcedBreaks.end()) {
          GraphBreak b = forced->second;
          b.inlined = false;
          throw b;
        }
        step(ins);
      } catch (const GraphBreak& b) {
        rootBreak_ = std::make_unique<RootBreak>();
        rootBreak_->info = b;
        rootBreak_->instruction = ip_;
        rootBreak_->stack = std::move(stackBefore);
        rootBreak_->locals = std::move(localsBefore);
        rootBreak_->kwNames = kwBefore;
        // The instruction runs as Python: what tracing it added is not part of the capture.
        // Guards go (values it only looked at need none); recorded nodes or effects cannot be
        // taken back from the append-only graph, so the compile restarts with a break there.
        ctx_.guards.truncate(guardsBefore);
        rootBreak_->needsRestart = b.inlined || ctx_.graph.size() != nodesBefore || ctx_.effects.size() != effectsBefore;
        ctx_.userStack.pop_back();
        return nullptr;
      }
    } else {
      step(ins);
    }
    ip_ = next_;
  }
  ctx_.userStack.pop_back();
  return returned_;
}

ValueRef Tracer::loadGlobal(const std::string& name) {
  // Globals of the frame being compiled are reached as G['name']; an inlined function from
  // another module reads its own module's globals dict, held by the source. Either way the value
  // is guarded, and writes made earlier in this trace are seen.
  const bool rootGlobals = globals_ == ctx_.frame().globals;
  if (rootGlobals) {
    for (auto it = ctx_.effects.rbegin(); it != ctx_.effects.rend(); ++it)
      if (it->kind == SideEffect::Kind::kGlobal && it->name == name) return it->value;
  }
  PyObjectRef key = PyObjectRef::steal(checkPy(PyUnicode_FromString(name.c_str())));
  PyObject* v = PyDict_GetItemWithError(globals_, key.get());  // borrowed ref
  if (v == nullptr && PyErr_Occurred()) throw PythonError{};
  if (v != nullptr) {
    if (rootGlobals) return ctx_.wrap(v, Source::global(name));
    return ctx_.wrap(v, Source::item(moduleGlobalsSource(globals_), key.get()));
  }
  v = PyDict_GetItemWithError(builtins_, key.get());  // borrowed ref
  if (v == nullptr && PyErr_Occurred()) throw PythonError{};
  if (v != nullptr) {
    // A global of the same name defined later would shadow the builtin: guard its absence from
    // the module's dict (reached through the module object the globals belong to).
    if (PyObject* module = moduleOfGlobals(globals_)) {
      PyObjectRef modName = PyObjectRef::steal(PyObject_GetAttrString(module, "__name__"));
      PyErr_Clear();
      ctx_.guard(Source::object(module, modName && PyUnicode_Check(modName.get()) ? PyUnicode_AsUTF8(modName.get()) : "<module>"),
                 makeNoInstanceAttr(name));
    }
    if (builtins_ == ctx_.frame().builtins) return ctx_.wrap(v, Source::builtin(name));
    return ctx_.wrap(v, Source::item(moduleGlobalsSource(builtins_), key.get()));
  }
  ctx_.breakHere(BreakKind::kUnsupported, "name '" + name + "' is not defined");
}

// The module whose __dict__ is `globals` (sys.modules[globals['__name__']]), or null. Borrowed.
PyObject* moduleOfGlobals(PyObject* globals) {
  PyObject* name = PyDict_GetItemString(globals, "__name__");  // borrowed ref
  if (name == nullptr) return nullptr;
  PyObject* modules = PyImport_GetModuleDict();  // borrowed ref
  PyObject* module = PyDict_GetItemWithError(modules, name);  // borrowed ref
  if (module == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (!PyModule_Check(module) || PyModule_GetDict(module) != globals) return nullptr;
  return module;
}

Source moduleGlobalsSource(PyObject* globals) {
  PyObject* modName = PyDict_GetItemString(globals, "__name__");  // borrowed ref
  std::string display = modName && PyUnicode_Check(modName) ? PyUnicode_AsUTF8(modName) : "<module>";
  return Source::object(globals, display + ".__dict__");
}

// `x.shape[k]` (k a constant) and `a, b = x.shape` on a tensor with dynamic sizes: the sizes as
// symbolic ints, without making the torch.Size (whose other uses read every size as a Python
// int: specialised). Looks at the next instructions; true when it handled them.
bool Tracer::symbolicShapeRead(const ValueRef& tensor) {
  if (tensor->as<TensorData>().symSizes.empty() || ip_ + 2 >= static_cast<int>(bc_.instructions.size())) return false;
  const bc::Instruction& next = bc_.instructions[ip_ + 1];
  const bc::Instruction& after = bc_.instructions[ip_ + 2];
  if (next.opcode == LOAD_CONST && after.opcode == BINARY_SUBSCR) {
    PyObject* k = PyTuple_GET_ITEM(code_->co_consts, next.arg);  // borrowed
    if (!PyLong_CheckExact(k)) return false;
    ValueRef s = symbolicSize(ctx_, tensor, PyLong_AsLongLong(k));
    PyErr_Clear();
    if (!s) return false;
    push(s);
    jumpTo(ip_ + 3);
    return true;
  }
  if (next.opcode == UNPACK_SEQUENCE && next.arg == static_cast<int>(tensor->as<TensorData>().symSizes.size())) {
    std::vector<ValueRef> sizes;
    for (int d = 0; d < next.arg; ++d) {
      ValueRef s = symbolicSize(ctx_, tensor, d);
      if (!s) return false;
      sizes.push_back(s);
    }
    for (int d = next.arg; d-- > 0;) push(sizes[d]);  // the first item on top, as UNPACK_SEQUENCE
    jumpTo(ip_ + 2);
    return true;
  }
  return false;
}

bool Tracer::truthiness(const ValueRef& v) {
  switch (v->kind) {
    case ValueKind::kSymInt:
      return symIntTruth(ctx_, v);
    case ValueKind::kSymFloat:
      return PyFloat_AS_DOUBLE(specializeSymFloat(ctx_, v, "truth value").get()) != 0.0;
    case ValueKind::kConst: {
      int r = PyObject_IsTrue(v->py());
      if (r < 0) throw PythonError{};
      return r != 0;
    }
    case ValueKind::kTensor:
      ctx_.breakHere(BreakKind::kDataDependentBranch,
                     "branch on the value of a tensor (" + describe(*v) + ")");
    case ValueKind::kTuple:
    case ValueKind::kList:
    case ValueKind::kDict:
      return !v->items.empty();
    case ValueKind::kNull:
      return false;
    case ValueKind::kObject: {
      if (v->py() == Py_None) return false;
      PyTypeObject* t = Py_TYPE(v->py());
      const bool hasLen = (t->tp_as_sequence && t->tp_as_sequence->sq_length) ||
                          (t->tp_as_mapping && t->tp_as_mapping->mp_length);
      const bool hasBool = t->tp_as_number && t->tp_as_number->nb_bool;
      if (!v->source && v->name == kMadeInTrace && !PyAnySet_Check(v->py()) && !isModule(v->py())) {
        // An instance made in the trace: its attributes live in the trace (call_constructs.h).
        if (hasLen || hasBool) ctx_.breakHere(BreakKind::kUnsupported, "truth value of " + describe(*v) + " made in the function (defines __bool__ or __len__)");
        return true;
      }
      if ((isModule(v->py()) || PyCallable_Check(v->py())) && !hasLen && !hasBool) return true;
      if (hasBool) ctx_.breakHere(BreakKind::kUnsupported, "truth value of " + describe(*v) + " (defines __bool__)");
      if (hasLen || PyDict_Check(v->py()) || PyList_Check(v->py()) || PyTuple_Check(v->py())) {
        Py_ssize_t n = PyObject_Length(v->py());
        if (n < 0) ctx_.breakHere(BreakKind::kException, "len() of " + describe(*v) + " raised");
        ctx_.guard(v->source, makeLengthCheck(n));
        return n > 0;
      }
      ctx_.breakHere(BreakKind::kUnsupported, "truth value of " + describe(*v));
    }
    default:
      return true;
  }
}

// One instruction: each opcode family has its handler (a switch returning false for opcodes it
// does not handle); an opcode no family handles is a graph break naming it.
void Tracer::step(const bc::Instruction& ins) {
  if (stepSlots(ins) || stepCalls(ins) || stepOperators(ins) || stepContainers(ins) || stepIteration(ins) ||
      stepControl(ins))
    return;
  ctx_.breakHere(BreakKind::kUnsupportedBytecode,
                 std::string("instruction ") + bc::opcodeName(ins.opcode) + " is not supported");
}

// Frame slots, the stack, constants, locals, cells and globals.
bool Tracer::stepSlots(const bc::Instruction& ins) {
  const int op = ins.opcode;
  const int arg = ins.arg;
  (void)arg;
  switch (op) {
    case NOP:
    case RESUME:
#ifdef PRECALL
    case PRECALL:
#endif
      return true;
    case CACHE:
      return true;
#ifdef COPY_FREE_VARS
    case COPY_FREE_VARS: {
      // Free variables are the last `arg` slots.
      int n = static_cast<int>(locals_.size());
      for (int k = 0; k < arg; ++k) {
        int slot = n - arg + k;
        auto box = std::make_shared<CellBox>();
        if (parent_ == nullptr) {
          box->contents = realize(locals_[slot]);  // the value read through the closure at entry
          box->rootSlot = slot;
          locals_[slot] = makeCell(box, slot);
        } else {
          locals_[slot] = makeCell(k < static_cast<int>(closure_.size()) ? closure_[k] : box, slot);
        }
      }
      return true;
    }
#endif
    case MAKE_CELL: {
      ValueRef cell = makeCell(nullptr, arg);
      CellBox& box = *cell->as<CellData>().box;
      box.contents = locals_[arg];
      if (parent_ == nullptr) box.rootSlot = arg;
      locals_[arg] = cell;
      return true;
    }
    case POP_TOP:
      pop();
      return true;
    case PUSH_NULL:
      push(makeNull());
      return true;
    case COPY:
      DYNAMO_INTERNAL_ASSERT(static_cast<int>(stack_.size()) >= arg, "stack underflow at ", ip_);
      push(stack_[stack_.size() - arg]);
      return true;
    case SWAP:
      DYNAMO_INTERNAL_ASSERT(static_cast<int>(stack_.size()) >= arg, "stack underflow at ", ip_);
      std::swap(stack_[stack_.size() - 1], stack_[stack_.size() - arg]);
      return true;
    case LOAD_CONST:
      push(makeConst(PyTuple_GET_ITEM(code_->co_consts, arg)));  // borrowed ref
      return true;
#ifdef RETURN_CONST
    case RETURN_CONST:
      returned_ = makeConst(PyTuple_GET_ITEM(code_->co_consts, arg));
      done_ = true;
      return true;
#endif
    case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
    case LOAD_FAST_CHECK:
#endif
    {
      const ValueRef& v = locals_[arg];
      if (!v) ctx_.breakHere(BreakKind::kUnsupported, "local '" + localNames_[arg] + "' is unbound");
      push(v);
      return true;
    }
#ifdef LOAD_FAST_AND_CLEAR
    case LOAD_FAST_AND_CLEAR:
      push(locals_[arg] ? locals_[arg] : makeNull());
      locals_[arg] = nullptr;
      return true;
#endif
    case STORE_FAST: {
      ValueRef v = popRaw();
      locals_[arg] = v->isNull() ? nullptr : v;
      return true;
    }
    case DELETE_FAST:
      locals_[arg] = nullptr;
      return true;
    case LOAD_CLOSURE:
      push(locals_[arg]);
      return true;
    case LOAD_DEREF: {
      const ValueRef& c = locals_[arg];
      if (!c || c->kind != ValueKind::kCell || !c->as<CellData>().box->contents)
        ctx_.breakHere(BreakKind::kUnsupported, "free variable '" + localNames_[arg] + "' is unbound");
      push(c->as<CellData>().box->contents);
      return true;
    }
    case STORE_DEREF: {
      ValueRef v = pop();
      const ValueRef& c = locals_[arg];
      DYNAMO_INTERNAL_ASSERT(c, "STORE_DEREF on an unbound slot");
      CellBox& box = *c->as<CellData>().box;  // checks that it is a cell
      box.contents = v;
      if (box.rootSlot >= 0) {
        // A cell of the root frame, written here or by an inlined closure: stored after the graph.
        ctx_.recordEffect(SideEffect::Kind::kCell, nullptr, "", box.rootSlot, v);
      } else if (box.external) {
        ctx_.breakHere(BreakKind::kUnsupported, "assignment to a closure variable of an outer function");
      }
      return true;
    }
    case LOAD_GLOBAL: {
      bool pushNull = arg & 1;
      std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code_->co_names, arg >> 1));
      ValueRef v = loadGlobal(name);
      if (pushNull) push(makeNull());
      push(v);
      return true;
    }
    case STORE_GLOBAL: {
      ValueRef v = pop();
      std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code_->co_names, arg));
      if (parent_ != nullptr && globals_ != ctx_.frame().globals)
        ctx_.breakHere(BreakKind::kUnsupported, "assignment to a global of another module");
      ctx_.recordEffect(SideEffect::Kind::kGlobal, nullptr, name, -1, v);
      return true;
    }
    default:
      return false;
  }
}

// Attributes, calls and function objects.
bool Tracer::stepCalls(const bc::Instruction& ins) {
  const int op = ins.opcode;
  const int arg = ins.arg;
  (void)arg;
  switch (op) {
    case LOAD_ATTR: {
      int nameIdx = bc::nameIndex(op, arg);
      std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code_->co_names, nameIdx));
      ValueRef obj = pop();
#if PY_VERSION_HEX >= 0x030C0000
      if (arg & 1) {  // method form: [NULL, attr] is equivalent to [method, self]
        ValueRef a = getAttr(*this, obj, name);
        push(makeNull());
        push(a);
        return true;
      }
#endif
      if (name == "shape" && obj->isTensor() && symbolicShapeRead(obj)) return true;
      push(getAttr(*this, obj, name));
      return true;
    }
#if PY_VERSION_HEX >= 0x030C0000
    case LOAD_SUPER_ATTR: {
      // super(class, self).name, with the global `super` (or whatever the name is bound to), the
      // class and the receiver on the stack; the method form pushes [NULL, attr] like LOAD_ATTR.
      const int nameIdx = bc::nameIndex(op, arg);
      std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code_->co_names, nameIdx));
      ValueRef self = pop();
      ValueRef cls = pop();
      ValueRef superFn = pop();
      ValueRef sup = callValue(*this, superFn, {cls, self}, {});
      ValueRef a = getAttr(*this, sup, name);
      if (arg & 1) push(makeNull());
      push(a);
      return true;
    }
#endif
#ifdef LOAD_METHOD
    case LOAD_METHOD: {
      std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code_->co_names, arg));
      ValueRef obj = pop();
      ValueRef a = getAttr(*this, obj, name);
      push(makeNull());
      push(a);
      return true;
    }
#endif
    case STORE_ATTR: {
      std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code_->co_names, arg));
      ValueRef obj = pop();
      ValueRef v = pop();
      setAttr(ctx_, obj, name, v);
      return true;
    }
    case KW_NAMES:
      kwNames_ = makeConst(PyTuple_GET_ITEM(code_->co_consts, arg));
      return true;
    case CALL:
      doCall(arg);
      return true;
    case CALL_FUNCTION_EX: {
      ValueRef kw = (arg & 1) ? pop() : nullptr;
      ValueRef posargs = pop();
      ValueRef fn = pop();
      ValueRef maybeNull = pop();
      std::vector<ValueRef> args;
      if (posargs->kind == ValueKind::kTuple || posargs->kind == ValueKind::kList) {
        args = posargs->items;
      } else if (posargs->isConst() && PyTuple_Check(posargs->py())) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(posargs->py()); ++k)
          args.push_back(makeConst(PyTuple_GET_ITEM(posargs->py(), k)));
      } else {
        ctx_.breakHere(BreakKind::kUnsupported, "f(*args) with args of unknown length");
      }
      std::vector<std::pair<std::string, ValueRef>> kwargs;
      if (kw) {
        if (kw->kind != ValueKind::kDict)
          ctx_.breakHere(BreakKind::kUnsupported, "f(**kwargs) with unknown kwargs");
        for (size_t k = 0; k < kw->keys.size(); ++k) {
          if (!PyUnicode_Check(kw->keys[k].get()))
            ctx_.breakHere(BreakKind::kException, "keywords must be strings");
          kwargs.emplace_back(PyUnicode_AsUTF8(kw->keys[k].get()), kw->items[k]);
        }
      }
      if (!maybeNull->isNull()) args.insert(args.begin(), maybeNull);
      push(callValue(*this, fn, std::move(args), std::move(kwargs)));
      return true;
    }
    case MAKE_FUNCTION:
      doMakeFunction(arg);
      return true;
    default:
      return false;
  }
}

// a is b / a is not b (arg 1): identity of what the trace knows, breaking where it cannot tell.
void Tracer::doIsOp(int arg) {
  ValueRef b = pop();
  ValueRef a = pop();
  bool same;
  if (a->isConst() && b->isConst()) {
    same = a->py() == b->py();
  } else if ((a->kind == ValueKind::kObject || a->isConst()) &&
             (b->kind == ValueKind::kObject || b->isConst())) {
    if (a->kind == ValueKind::kObject && b->kind == ValueKind::kObject && a->source && b->source &&
        a->source != b->source && !(a->idGuarded && b->idGuarded))
      ctx_.breakHere(BreakKind::kUnsupported, "identity test between two inputs ('" + a->source.name() +
                                                  "' is '" + b->source.name() + "')");
    same = a->py() == b->py();
  } else if (a->isTensor() && b->isTensor()) {
    const NodeRef& na = a->as<TensorData>().node;
    const NodeRef& nb = b->as<TensorData>().node;
    if (na != nb && a->source && b->source)
      ctx_.breakHere(BreakKind::kUnsupported, "identity test between two input tensors");
    same = na == nb;
  } else if ((a->isConst() && a->py() == Py_None) || (b->isConst() && b->py() == Py_None)) {
    same = false;  // a symbolic value is never None
  } else {
    same = a.get() == b.get();
  }
  push(makeConst((same != (arg == 1)) ? Py_True : Py_False));
}

// item in container / not in (arg 1).
void Tracer::doContains(int arg) {
  ValueRef container = pop();
  ValueRef item = pop();
  PyObjectRef c = concrete(container);
  PyObjectRef i = concrete(item);
  bool found = false;
  if (c && i) {
    int r = PySequence_Contains(c.get(), i.get());
    if (r < 0) throw PythonError{};
    found = r == 1;
  } else if (i && (container->kind == ValueKind::kDict)) {
    for (const PyObjectRef& k : container->keys) {
      int r = PyObject_RichCompareBool(k.get(), i.get(), Py_EQ);
      if (r < 0) throw PythonError{};
      if (r) found = true;
    }
  } else {
    ctx_.breakHere(BreakKind::kUnsupported, "`in` test on " + describe(*container));
  }
  push(makeConst((found != (arg == 1)) ? Py_True : Py_False));
}

// obj[index] = v: a tensor setitem is recorded; list and dict items change in the trace.
void Tracer::doStoreSubscr() {
  ValueRef index = pop();
  ValueRef obj = pop();
  ValueRef v = pop();
  if (obj->isTensor()) {
    PyObjectRef setitem = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().operatorModule, "setitem")));
    ctx_.recordCall(setitem.get(), "", {obj, index, v}, {});
    return;
  }
  PyObjectRef key = concrete(index);
  if (obj->kind == ValueKind::kList && key && PyLong_Check(key.get())) {
    Py_ssize_t k = PyLong_AsSsize_t(key.get());
    if (k < 0) k += static_cast<Py_ssize_t>(obj->items.size());
    if (k < 0 || k >= static_cast<Py_ssize_t>(obj->items.size()))
      ctx_.breakHere(BreakKind::kException, "list index out of range");
    obj->items[k] = v;
    ctx_.recordContents(obj);
    return;
  }
  if (obj->kind == ValueKind::kDict && key) {
    setDictItem(obj, key, v);
    ctx_.recordContents(obj);
    return;
  }
  ctx_.breakHere(BreakKind::kUnsupported, "item assignment on " + describe(*obj));
}

// del obj[index] on a dict or a list of the trace.
void Tracer::doDeleteSubscr() {
  ValueRef index = pop();
  ValueRef obj = pop();
  PyObjectRef key = concrete(index);
  if (obj->kind == ValueKind::kDict && key) {
    int i = dictIndex(obj, key);
    if (i < 0) ctx_.breakHere(BreakKind::kException, "KeyError in del d[key]");
    obj->keys.erase(obj->keys.begin() + i);
    obj->items.erase(obj->items.begin() + i);
    ctx_.recordContents(obj);
    return;
  }
  if (obj->kind == ValueKind::kList && key && PyLong_Check(key.get())) {
    Py_ssize_t k = PyLong_AsSsize_t(key.get());
    const Py_ssize_t n = static_cast<Py_ssize_t>(obj->items.size());
    if (k < 0) k += n;
    if (k < 0 || k >= n) ctx_.breakHere(BreakKind::kException, "list assignment index out of range");
    obj->items.erase(obj->items.begin() + k);
    ctx_.recordContents(obj);
    return;
  }
  ctx_.breakHere(BreakKind::kUnsupported, "del of an item of " + describe(*obj));
}

// Operators, comparisons and subscripts.
bool Tracer::stepOperators(const bc::Instruction& ins) {
  const int op = ins.opcode;
  const int arg = ins.arg;
  (void)arg;
  switch (op) {
    case BINARY_OP:
      doBinary(arg);
      return true;
    case UNARY_NEGATIVE:
    case UNARY_INVERT: {
      ValueRef v = pop();
      PyObject* fn = PyObject_GetAttrString(torchApi().operatorModule,
                                            op == UNARY_NEGATIVE ? "neg" : "invert");  // new
      PyObjectRef f = PyObjectRef::steal(checkPy(fn));
      push(callValue(*this, makeObject(f.get()), {v}, {}));
      return true;
    }
#ifdef UNARY_POSITIVE
    case UNARY_POSITIVE: {
      ValueRef v = pop();
      PyObjectRef f = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().operatorModule, "pos")));
      push(callValue(*this, makeObject(f.get()), {v}, {}));
      return true;
    }
#endif
#ifdef CALL_INTRINSIC_1
    // 3.12 moved a few one-operand instructions behind CALL_INTRINSIC_1 (Include/internal/
    // pycore_intrinsics.h): unary `+` and the list-to-tuple of `(*a, *b)` and `f(*a, *b)`.
    case CALL_INTRINSIC_1: {
      constexpr int kUnaryPositive = 5, kListToTuple = 6;
      if (arg == kUnaryPositive) {
        ValueRef v = pop();
        PyObjectRef f = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().operatorModule, "pos")));
        push(callValue(*this, makeObject(f.get()), {v}, {}));
        return true;
      }
      if (arg == kListToTuple) {
        ValueRef l = pop();
        push(makeTuple(l->items));
        return true;
      }
      return false;
    }
#endif
    case UNARY_NOT: {
      ValueRef v = pop();
      if (v->isTensor()) {
        PyObjectRef f = PyObjectRef::steal(checkPy(PyObject_GetAttrString(torchApi().operatorModule, "not_")));
        ctx_.breakHere(BreakKind::kDataDependentBranch, "`not` applied to a tensor");
      }
      push(makeConst(truthiness(v) ? Py_False : Py_True));
      return true;
    }
    case COMPARE_OP:
#if PY_VERSION_HEX >= 0x030C0000
      doCompare(arg >> 4);
#else
      doCompare(arg);
#endif
      return true;
    case IS_OP:
      doIsOp(arg);
      return true;
    case CONTAINS_OP:
      doContains(arg);
      return true;
    case BINARY_SUBSCR: {
      ValueRef index = pop();
      ValueRef obj = pop();
      push(getItem(ctx_, obj, index));
      return true;
    }
#ifdef BINARY_SLICE
    case BINARY_SLICE: {
      ValueRef stop = pop();
      ValueRef start = pop();
      ValueRef obj = pop();
      push(getItem(ctx_, obj, makeSlice(start, stop, makeConst(Py_None))));
      return true;
    }
#endif
    case STORE_SUBSCR:
      doStoreSubscr();
      return true;
    case DELETE_SUBSCR:
      doDeleteSubscr();
      return true;
    default:
      return false;
  }
}

// Building and changing containers.
bool Tracer::stepContainers(const bc::Instruction& ins) {
  const int op = ins.opcode;
  const int arg = ins.arg;
  (void)arg;
  switch (op) {
    case BUILD_TUPLE:
      push(makeTuple(popN(arg)));
      return true;
    case BUILD_LIST:
      push(makeList(popN(arg)));
      return true;
    case BUILD_SLICE: {
      ValueRef step = arg == 3 ? pop() : makeConst(Py_None);
      ValueRef stop = pop();
      ValueRef start = pop();
      push(makeSlice(start, stop, step));
      return true;
    }
    case BUILD_MAP: {
      std::vector<ValueRef> kv = popN(2 * arg);
      ValueRef d = std::make_shared<Value>();
      d->kind = ValueKind::kDict;
      for (int k = 0; k < arg; ++k) {
        PyObjectRef key = concrete(kv[2 * k]);
        if (!key) ctx_.breakHere(BreakKind::kUnsupported, "dict with a non-constant key");
        setDictItem(d, key, kv[2 * k + 1]);
      }
      push(d);
      return true;
    }
    case BUILD_CONST_KEY_MAP: {
      ValueRef keys = pop();
      std::vector<ValueRef> vals = popN(arg);
      ValueRef d = std::make_shared<Value>();
      d->kind = ValueKind::kDict;
      for (int k = 0; k < arg; ++k) {
        setDictItem(d, PyObjectRef::borrow(PyTuple_GET_ITEM(keys->py(), k)), vals[k]);
      }
      push(d);
      return true;
    }
    case BUILD_SET:  // sets of constants and known objects (call_constructs.h)
      push(buildSet(ctx_, popN(arg)));
      return true;
    case SET_ADD: {
      ValueRef v = pop();
      setAdd(ctx_, top(arg), v);
      return true;
    }
    case SET_UPDATE: {
      ValueRef v = pop();
      setUpdate(ctx_, top(arg), v);
      return true;
    }
    case LIST_APPEND: {
      ValueRef v = pop();
      ValueRef& list = top(arg);
      list->items.push_back(v);
      ctx_.recordContents(list);
      return true;
    }
    case LIST_EXTEND: {
      ValueRef v = pop();
      ValueRef& list = top(arg);
      for (ValueRef& item : iterateValue(ctx_, v)) list->items.push_back(item);
      return true;
    }
#ifdef LIST_TO_TUPLE
    case LIST_TO_TUPLE: {
      ValueRef l = pop();
      push(makeTuple(l->items));
      return true;
    }
#endif
    case MAP_ADD: {
      ValueRef v = pop();
      ValueRef k = pop();
      ValueRef& d = top(arg);
      PyObjectRef key = concrete(k);
      if (!key) ctx_.breakHere(BreakKind::kUnsupported, "dict comprehension with a non-constant key");
      setDictItem(d, key, v);
      return true;
    }
    case DICT_UPDATE:
    case DICT_MERGE: {
      ValueRef v = pop();
      ValueRef& d = top(arg);
      if (v->kind != ValueKind::kDict)
        ctx_.breakHere(BreakKind::kUnsupported, "dict update from " + describe(*v));
      for (size_t k = 0; k < v->keys.size(); ++k) {
        if (op == DICT_MERGE && dictIndex(d, v->keys[k]) >= 0)
          ctx_.breakHere(BreakKind::kException, "duplicate keyword argument in **kwargs");
        setDictItem(d, v->keys[k], v->items[k]);
      }
      return true;
    }
    default:
      return false;
  }
}

// Unpacking and iterating: sequences, iterators, `yield from`.
bool Tracer::stepIteration(const bc::Instruction& ins) {
  const int arg = ins.arg;
  switch (ins.opcode) {
    case UNPACK_SEQUENCE:
      doUnpack(arg);
      return true;
    case UNPACK_EX: {
      // a, *rest, b = seq: arg = before | (after << 8).
      int before = arg & 0xFF, after = arg >> 8;
      std::vector<ValueRef> items = iterateValue(ctx_, pop());
      if (static_cast<int>(items.size()) < before + after)
        ctx_.breakHere(BreakKind::kException, "not enough values to unpack");
      std::vector<ValueRef> middle(items.begin() + before, items.end() - after);
      for (int k = 0; k < after; ++k) push(items[items.size() - 1 - k]);
      push(makeList(std::move(middle)));
      for (int k = before - 1; k >= 0; --k) push(items[k]);
      return true;
    }
    case GET_ITER: {
      ValueRef v = pop();
      if (v->kind == ValueKind::kIterator) {  // iter(it) is it
        push(v);
        return true;
      }
      push(makeIterator(v, v->kind == ValueKind::kList ? std::vector<ValueRef>{} : iterateValue(ctx_, v)));
      return true;
    }
    case FOR_ITER:
      doForIter(ins);
      return true;
    case GET_YIELD_FROM_ITER: {  // `yield from x` in a generator being traced: iter(x)
      if (!generator_) return false;
      ValueRef v = pop();
      push(v->kind == ValueKind::kIterator
               ? v
               : makeIterator(v, v->kind == ValueKind::kList ? std::vector<ValueRef>{} : iterateValue(ctx_, v)));
      return true;
    }
    case SEND:
      if (!generator_) return false;
      doSend(ins);
      return true;
#ifdef END_SEND
    case END_SEND: {  // 3.12: [receiver, value] -> [value]
      ValueRef v = popRaw();
      popRaw();
      push(std::move(v));
      return true;
    }
#endif
#ifdef END_FOR
    case END_FOR:
      pop();
      pop();
      return true;
#endif
    default:
      return false;
  }
}

// f-string assembly of constant parts.
void Tracer::doBuildString(int count) {
  std::vector<ValueRef> parts = popN(count);
  std::string s;
  for (const ValueRef& p : parts) {
    if (!p->isConst() || !PyUnicode_Check(p->py()))
      ctx_.breakHere(BreakKind::kUnsupported, "f-string with a non-constant part");
    s += PyUnicode_AsUTF8(p->py());
  }
  PyObjectRef str = PyObjectRef::steal(checkPy(PyUnicode_FromString(s.c_str())));
  push(makeConst(str.get()));
}

// import: it runs now (it has usually run already); the module is a constant of the trace.
void Tracer::doImportName(int nameIndex) {
  ValueRef fromlist = pop();
  ValueRef level = pop();
  PyObject* name = PyTuple_GET_ITEM(code_->co_names, nameIndex);  // borrowed ref
  PyObjectRef mod = PyObjectRef::steal(PyImport_ImportModuleLevelObject(
      name, globals_, nullptr, fromlist->py(), static_cast<int>(PyLong_AsLong(level->py()))));
  if (!mod) ctx_.breakHere(BreakKind::kException, std::string("import of ") + PyUnicode_AsUTF8(name) + " failed");
  // Held by the trace, so attributes read from it are guarded (import cfg; cfg.SCALE).
  PyObjectRef modName = PyObjectRef::steal(PyObject_GetAttrString(mod.get(), "__name__"));
  PyErr_Clear();
  push(makeObject(mod.get(), Source::object(mod.get(), modName && PyUnicode_Check(modName.get())
                                                           ? PyUnicode_AsUTF8(modName.get()) : "<module>")));
}

// with: only grad-mode managers (no_grad, enable_grad, set_grad_enabled, no-op managers),
// autocast blocks (autocast.h) and inference-mode blocks (inference_mode.h).
void Tracer::doBeforeWith() {
  ValueRef mgr = pop();
  if (ValueRef cm = autocastManagerOf(ctx_, mgr)) mgr = cm;  // @torch.autocast(...)'s wrapper
  using Role = GradModeData::Role;
  if (mgr->kind == ValueKind::kGradMode && mgr->as<GradModeData>().role == Role::kAutocast) {
    push(enterAutocast(ctx_, mgr));
    push(makeConst(Py_None));
    return;
  }
  if (mgr->kind == ValueKind::kGradMode && mgr->as<GradModeData>().role == Role::kInferenceMode) {
    push(enterInferenceMode(ctx_, mgr));
    push(makeConst(Py_None));
    return;
  }
  if (mgr->kind != ValueKind::kGradMode)
    ctx_.breakHere(BreakKind::kUnsupported, "`with` on " + describe(*mgr));
  // Push the __exit__ callable (restores the previous mode) and the __enter__ result.
  const GradModeData& gm = mgr->as<GradModeData>();
  if (gm.role == Role::kNoOp) {  // nullcontext(), record_function(name): nothing on entry or exit
    push(makeGradMode({Role::kNoOpExit, false}));
    push(makeConst(Py_None));
    return;
  }
  if (gm.role == Role::kSetGradEnabled) {
    // Already switched by the constructor; __exit__ restores the mode from before it.
    push(makeGradMode({Role::kExit, gm.restore}));
    push(makeConst(Py_None));
    return;
  }
  ValueRef exit = makeGradMode({Role::kExit, ctx_.gradEnabled});
  ValueRef enterFn = std::make_shared<Value>(*mgr);
  enterFn->as<GradModeData>().role = Role::kEnter;
  push(exit);
  push(callValue(*this, enterFn, {}, {}));
}

// Jumps, returns, yields, strings, imports, raise and with.
bool Tracer::stepControl(const bc::Instruction& ins) {
  const int op = ins.opcode;
  const int arg = ins.arg;
  (void)arg;
  switch (op) {
    case JUMP_FORWARD:
    case JUMP_BACKWARD:
#ifdef JUMP_BACKWARD_NO_INTERRUPT
    case JUMP_BACKWARD_NO_INTERRUPT:
#endif
      jumpTo(ins.target);
      return true;
#ifdef POP_JUMP_FORWARD_IF_FALSE
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_FALSE:
#endif
#ifdef POP_JUMP_IF_FALSE
    case POP_JUMP_IF_FALSE:
#endif
    {
      ValueRef v = top();
      bool t = truthiness(v);
      pop();
      if (!t) jumpTo(ins.target);
      return true;
    }
#ifdef POP_JUMP_FORWARD_IF_TRUE
    case POP_JUMP_FORWARD_IF_TRUE:
    case POP_JUMP_BACKWARD_IF_TRUE:
#endif
#ifdef POP_JUMP_IF_TRUE
    case POP_JUMP_IF_TRUE:
#endif
    {
      ValueRef v = top();
      bool t = truthiness(v);
      pop();
      if (t) jumpTo(ins.target);
      return true;
    }
#ifdef POP_JUMP_FORWARD_IF_NONE
    case POP_JUMP_FORWARD_IF_NONE:
    case POP_JUMP_BACKWARD_IF_NONE:
    case POP_JUMP_FORWARD_IF_NOT_NONE:
    case POP_JUMP_BACKWARD_IF_NOT_NONE:
#endif
#ifdef POP_JUMP_IF_NONE
    case POP_JUMP_IF_NONE:
    case POP_JUMP_IF_NOT_NONE:
#endif
    {
      ValueRef v = pop();
      bool isNone = (v->isConst() || v->kind == ValueKind::kObject) && v->py() == Py_None;
      bool wantNone = false;
#ifdef POP_JUMP_FORWARD_IF_NONE
      wantNone = op == POP_JUMP_FORWARD_IF_NONE || op == POP_JUMP_BACKWARD_IF_NONE;
#endif
#ifdef POP_JUMP_IF_NONE
      wantNone = op == POP_JUMP_IF_NONE;
#endif
      if (isNone == wantNone) jumpTo(ins.target);
      return true;
    }
#ifdef JUMP_IF_FALSE_OR_POP
    case JUMP_IF_FALSE_OR_POP:
    case JUMP_IF_TRUE_OR_POP: {
      bool t = truthiness(top());
      if (t == (op == JUMP_IF_TRUE_OR_POP)) {
        jumpTo(ins.target);
      } else {
        pop();
      }
      return true;
    }
#endif
    case RETURN_VALUE:
      returned_ = pop();
      done_ = true;
      return true;
    case FORMAT_VALUE:
      doFormat(arg);
      return true;
    case BUILD_STRING:
      doBuildString(arg);
      return true;
#ifdef RETURN_GENERATOR
    case RETURN_GENERATOR:
      if (!generator_) return false;
      push(makeConst(Py_None));  // popped by the POP_TOP that follows
      return true;
#endif
    case YIELD_VALUE:  // resume() returns the value; the next resume continues after the yield
      if (!generator_) return false;
      yielded_ = pop();
      push(makeConst(Py_None));  // the value sent in
      suspended_ = true;
      return true;
    case IMPORT_NAME:
      doImportName(arg);
      return true;
    case IMPORT_FROM: {
      std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code_->co_names, arg));
      ValueRef mod = top();
      push(getAttr(*this, mod, name));
      return true;
    }
    case LOAD_ASSERTION_ERROR:
      push(makeObject(PyExc_AssertionError));
      return true;
    case RAISE_VARARGS:
      ctx_.breakHere(BreakKind::kException, "raise statement");
    case BEFORE_WITH:
      doBeforeWith();
      return true;
    default:
      return false;
  }
}


// ---- handlers with more logic -----------------------------------------------------------------

void Tracer::doCall(int nargs) {
  std::vector<ValueRef> args = popN(nargs);
  ValueRef fn = pop();
  ValueRef selfOrNull = pop();
  std::vector<std::pair<std::string, ValueRef>> kwargs;
  if (kwNames_) {
    PyObject* names = kwNames_->py();  // borrowed ref: a tuple of str
    Py_ssize_t nk = PyTuple_GET_SIZE(names);
    size_t first = args.size() - static_cast<size_t>(nk);
    for (Py_ssize_t k = 0; k < nk; ++k)
      kwargs.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, k)), args[first + k]);
    args.resize(first);
    kwNames_ = nullptr;
  }
  // [method, self, args] (3.11 LOAD_METHOD) or [NULL, callable, args].
  if (!selfOrNull->isNull()) {
    args.insert(args.begin(), fn);
    fn = selfOrNull;
  }
  push(callValue(*this, fn, std::move(args), std::move(kwargs)));
}

void Tracer::doBinary(int nbOp) {
  ValueRef b = pop();
  ValueRef a = pop();
  if ((a->kind == ValueKind::kList && a->name == "dict_view") || (b->kind == ValueKind::kList && b->name == "dict_view"))
    ctx_.breakHere(BreakKind::kUnsupported, "operator on a dict view (keys(), values(), items())");
  std::string name;
  PyObject* fn = binaryOperator(nbOp, &name);  // borrowed ref
  DYNAMO_INTERNAL_ASSERT(fn != nullptr, "unknown BINARY_OP ", nbOp);
  if (nbOp >= 13 && isTraceSet(*a)) {  // s |= t changes s itself (call_constructs.h)
    push(setInPlaceOperator(ctx_, a, b, fn, name));
    return;
  }
  // In-place operators on immutable Python values behave like the plain ones.
  if (nbOp >= 13 && (a->kind == ValueKind::kList || a->kind == ValueKind::kDict) && nbOp != 13)
    ctx_.breakHere(BreakKind::kUnsupported, "in-place operator on a " + describe(*a));
  if (nbOp >= 13 && !a->isTensor() && a->kind != ValueKind::kList) fn = binaryOperator(nbOp - 13, &name);
  if (nbOp >= 13 && a->kind == ValueKind::kList && name == "iadd") {
    for (ValueRef& item : iterateValue(ctx_, b)) a->items.push_back(item);
    ctx_.recordContents(a);
    push(a);
    return;
  }
  push(callValue(*this, makeObject(fn), {a, b}, {}));
}

void Tracer::doCompare(int cmp) {
  ValueRef b = pop();
  ValueRef a = pop();
  PyObject* fn = compareOperator(cmp);  // borrowed ref
  DYNAMO_INTERNAL_ASSERT(fn != nullptr, "unknown COMPARE_OP ", cmp);
  push(callValue(*this, makeObject(fn), {a, b}, {}));
}

void Tracer::doForIter(const bc::Instruction& ins) {
  ValueRef& it = top();
  if (it->kind != ValueKind::kIterator)
    ctx_.breakHere(BreakKind::kUnsupported, "for loop over " + describe(*it));
  const IteratorData& data = it->as<IteratorData>();
  if (data.watched && data.watched->keys.size() != data.watchedSize)
    ctx_.breakHere(BreakKind::kException, "dictionary changed size during iteration");
  ValueRef item;
  if (nextItem(it, &item)) {  // a generator runs to its next yield now (call_constructs.h)
    push(item);
    return;
  }
#if PY_VERSION_HEX >= 0x030C0000
  // 3.12: the exhausted iterator is popped and END_FOR (the target) is skipped.
  pop();
  jumpTo(ins.target + 1);
#else
  pop();
  jumpTo(ins.target);
#endif
}

// `yield from it` (GET_YIELD_FROM_ITER; LOAD_CONST None; SEND; YIELD_VALUE; ...; JUMP back to
// SEND): each SEND pulls the next item of the inner iterator, which the YIELD_VALUE after it
// passes out; the value sent back in is always None (our consumers only call next()). When the
// inner iterator is done, its return value is the expression's value and SEND jumps past the loop.
void Tracer::doSend(const bc::Instruction& ins) {
  ValueRef sent = popRaw();
  if (!(sent->isConst() && sent->py() == Py_None))
    ctx_.breakHere(BreakKind::kUnsupported, "send() of a value other than None into `yield from`");
  ValueRef& receiver = top();
  if (receiver->kind != ValueKind::kIterator)
    ctx_.breakHere(BreakKind::kUnsupported, "`yield from` over " + describe(*receiver));
  ValueRef item;
  if (nextItem(receiver, &item)) {  // a generator runs to its next yield now
    push(std::move(item));
    return;
  }
  const std::shared_ptr<LazyIterator>& lazy = receiver->as<IteratorData>().lazy;
  ValueRef ret = lazy && lazy->returned ? lazy->returned : makeConst(Py_None);
#if PY_VERSION_HEX >= 0x030C0000
  push(std::move(ret));  // [receiver, value]: END_SEND (the target) drops the receiver
#else
  popRaw();  // 3.11: [value], and the target is the instruction after the loop
  push(std::move(ret));
#endif
  jumpTo(ins.target);
}

void Tracer::doMakeFunction(int flags) {
#if PY_VERSION_HEX < 0x030B0000
  pop();  // qualname
#endif
  ValueRef code = pop();
  FunctionData data;
  if (flags & 0x08) {
    ValueRef closure = pop();
    for (const ValueRef& c : closure->items) {
      data.closure.push_back(c->as<CellData>().box);  // checks that it is a cell
    }
  }
  if (flags & 0x04) pop();  // annotations
  if (flags & 0x02) data.kwdefaults = pop();
  std::vector<ValueRef> defaults;
  if (flags & 0x01) {
    ValueRef d = pop();
    defaults = iterateValue(ctx_, d);
  }
  data.globals = PyObjectRef::borrow(globals_);
  std::string qualname = PyUnicode_AsUTF8(reinterpret_cast<PyCodeObject*>(code->py())->co_qualname);
  push(makeFunction(code->py(), std::move(defaults), std::move(qualname), std::move(data)));
}

void Tracer::doUnpack(int count) {
  ValueRef v = pop();
  std::vector<ValueRef> items;
  if (v->isTensor()) {
    for (int k = 0; k < count; ++k) {
      PyObjectRef idx = PyObjectRef::steal(PyLong_FromLong(k));
      items.push_back(getItem(ctx_, v, makeConst(idx.get())));
    }
  } else {
    items = iterateValue(ctx_, v);
  }
  if (static_cast<int>(items.size()) != count)
    ctx_.breakHere(BreakKind::kException, "unpacking " + std::to_string(items.size()) +
                                              " values into " + std::to_string(count));
  for (auto it = items.rbegin(); it != items.rend(); ++it) push(*it);
}

void Tracer::doFormat(int flags) {
  ValueRef spec = (flags & 0x04) ? pop() : nullptr;
  ValueRef v = pop();
  PyObjectRef obj = concrete(v);
  if (!obj) ctx_.breakHere(BreakKind::kUnsupported, "formatting " + describe(*v) + " in an f-string");
  PyObjectRef conv = obj;
  switch (flags & 0x03) {
    case 1: conv = PyObjectRef::steal(checkPy(PyObject_Str(obj.get()))); break;
    case 2: conv = PyObjectRef::steal(checkPy(PyObject_Repr(obj.get()))); break;
    case 3: conv = PyObjectRef::steal(checkPy(PyObject_ASCII(obj.get()))); break;
    default: break;
  }
  PyObjectRef out = PyObjectRef::steal(
      checkPy(PyObject_Format(conv.get(), spec ? spec->py() : nullptr)));
  push(makeConst(out.get()));
}

}  // namespace dynamo::core::interp
