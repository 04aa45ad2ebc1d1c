// Output code generation and resume functions (see codegen.h).
#include "codegen.h"
#include "call_constructs.h"

#include <opcode.h>

#include <functional>
#include <mutex>
#include <unordered_map>

#include "torch_api.h"

namespace dynamo::core::interp {

namespace bc = dynamo::core::bytecode;

// ---- resume registry --------------------------------------------------------------------------

namespace {
struct ResumeEntry {
  PyObjectRef code;  // keeps the key alive
  ResumeInfo info;
};
std::unordered_map<PyCodeObject*, ResumeEntry>& resumeRegistry() {
  static auto* registry = new std::unordered_map<PyCodeObject*, ResumeEntry>();
  return *registry;
}
}  // namespace

const ResumeInfo* resumeInfo(PyCodeObject* code) {
  auto& r = resumeRegistry();
  auto it = r.find(code);
  return it == r.end() ? nullptr : &it->second.info;
}

// ---- roots ------------------------------------------------------------------------------------

static std::string quotedName(const std::string& display) {
  size_t a = display.find("['");
  size_t b = display.rfind("']");
  return a == std::string::npos || b == std::string::npos ? display : display.substr(a + 2, b - a - 2);
}

RootInfo rootInfoOf(PyCodeObject*, const Source& root, const std::vector<std::string>& slotNames) {
  RootInfo info;
  if (root.kind() == SourceKind::kObject) {
    info.kind = RootInfo::Kind::kObject;
    info.object = root.heldObject();
    return info;
  }
  if (root.kind() == SourceKind::kLocal) {
    info.kind = RootInfo::Kind::kLocal;
    info.name = root.name();
    for (size_t i = 0; i < slotNames.size(); ++i)
      if (slotNames[i] == info.name) info.slot = static_cast<int>(i);
    DYNAMO_INTERNAL_ASSERT(info.slot >= 0, "no slot named ", info.name);
  } else {
    info.kind = RootInfo::Kind::kGlobal;
    info.name = quotedName(root.name());
  }
  return info;
}

// The slot of the receiver that zero-argument super() reads implicitly (the first argument, which
// CPython takes from the frame's first slot), or -1 when the code uses no `__class__` cell.
static int superReceiverSlot(PyCodeObject* code, const std::vector<std::string>& slots) {
  bc::CodeOptions opts = bc::codeOptionsFrom(code);
  bool usesClassCell = false;
  for (const std::string& f : opts.freevars) usesClassCell = usesClassCell || f == "__class__";
  if (!usesClassCell) return -1;
  std::string first;
  if (const ResumeInfo* info = resumeInfo(code)) first = info->firstArgName;
  else if (opts.argcount > 0 && !opts.varnames.empty()) first = opts.varnames[0];
  for (size_t i = 0; !first.empty() && i < slots.size(); ++i)
    if (slots[i] == first) return static_cast<int>(i);
  return -1;
}

// ---- planning ---------------------------------------------------------------------------------

namespace {

class Planner {
 public:
  Planner(CompileContext& ctx, GraphCallSpec& spec, std::vector<Source>& roots)
      : ctx_(ctx), spec_(spec), roots_(roots) {}

  int fetch(const Source& s) {
    auto it = fetchIndex_.find(s);
    if (it != fetchIndex_.end()) return it->second;
    FetchStep step;
    step.source = s;
    if (s.isRoot()) {
      int arg = -1;
      for (size_t i = 0; i < roots_.size(); ++i)
        if (roots_[i] == s) arg = static_cast<int>(i);
      if (arg < 0) {
        arg = static_cast<int>(roots_.size());
        roots_.push_back(s);
      }
      step.arg = arg;
    } else {
      step.base = fetch(s.base());
    }
    int index = static_cast<int>(spec_.fetches.size());
    spec_.fetches.push_back(step);
    fetchIndex_[s] = index;
    return index;
  }

  OutPlan plan(const ValueRef& v) {
    OutPlan p;
    switch (v->kind) {
      case ValueKind::kTensor:
        if (v->source) {
          p.kind = OutPlan::Kind::kFetched;
          p.index = fetch(v->source);
        } else {
          p.kind = OutPlan::Kind::kGraphOutput;
          p.index = outputIndex(v->graphNode());
        }
        return p;
      case ValueKind::kConst:
        p.kind = OutPlan::Kind::kConst;
        p.obj = v->obj;
        return p;
      case ValueKind::kSymInt:  // an int input is read again; a computed one comes out of the graph
      case ValueKind::kSymFloat:
        if (v->source) {
          p.kind = OutPlan::Kind::kFetched;
          p.index = fetch(v->source);
        } else {
          p.kind = OutPlan::Kind::kGraphOutput;
          p.index = outputIndex(v->graphNode());
        }
        return p;
      case ValueKind::kLazy:  // passed through untouched: read again from the frame
        p.kind = OutPlan::Kind::kFetched;
        p.index = fetch(v->source);
        return p;
      case ValueKind::kObject:
        if (!v->source && v->name == kMadeInTrace)  // call_constructs.h: one object for every call
          ctx_.breakHere(BreakKind::kUnsupported, "an object made inside the function (a set, a module, an instance) is used after the graph (each call must make its own)");
        if (v->source) {
          p.kind = OutPlan::Kind::kFetched;
          p.index = fetch(v->source);
        } else {
          p.kind = OutPlan::Kind::kConst;
          p.obj = v->obj;
        }
        return p;
      case ValueKind::kList:
      case ValueKind::kDict:
        if (v->name == "dict_view")
          ctx_.breakHere(BreakKind::kUnsupported, "a dict view (keys(), values(), items()) alive after the graph");
        if (v->source) {
          p.kind = OutPlan::Kind::kFetched;
          p.index = fetch(v->source);
          return p;
        }
        if (v->real) {  // the same container, reached through objects the code holds
          p.kind = OutPlan::Kind::kConst;
          p.obj = v->real;
          return p;
        }
        if (!noMemo_) {
          // A container made during the trace: built once, referenced wherever it appears again.
          auto seen = memoOf_.find(v.get());
          if (seen != memoOf_.end()) {
            p.kind = OutPlan::Kind::kMemoRef;
            p.index = seen->second;
            return p;
          }
          p.memo = spec_.memoSlots++;
          memoOf_[v.get()] = p.memo;
        }
        p.kind = v->kind == ValueKind::kList ? OutPlan::Kind::kList : OutPlan::Kind::kDict;
        if (v->kind == ValueKind::kDict && v->obj) {
          // A dict subclass made during the trace: only OrderedDict is rebuilt (by its own type).
          if (v->obj.get() != torchApi().orderedDictType)
            ctx_.breakHere(BreakKind::kUnsupported, "cannot rebuild a " + std::string(((PyTypeObject*)v->obj.get())->tp_name) + " made in the function after the graph");
          p.obj = v->obj;
        }
        for (const ValueRef& item : v->items) p.children.push_back(plan(item));
        p.keys = v->keys;
        return p;
      case ValueKind::kTuple:
        p.kind = v->obj ? OutPlan::Kind::kNamedTuple : OutPlan::Kind::kTuple;
        p.obj = v->obj;
        for (const ValueRef& item : v->items) p.children.push_back(plan(item));
        return p;
      case ValueKind::kSlice:
        p.kind = OutPlan::Kind::kSlice;
        for (const ValueRef& item : v->items) p.children.push_back(plan(item));
        return p;
      case ValueKind::kMethod:
        p.children.push_back(plan(v->self));
        if (v->obj) {
          // The very function bound to self (super().__init__ is not getattr(self, "__init__")).
          p.kind = OutPlan::Kind::kBoundMethod;
          p.obj = v->obj;
        } else {
          p.kind = OutPlan::Kind::kGetAttr;  // list.append and other container methods
          p.name = v->name;
        }
        return p;
      case ValueKind::kTensorAttr:
        p.kind = OutPlan::Kind::kGetAttr;
        p.children.push_back(plan(v->self));
        p.name = v->name;
        return p;
      default:
        ctx_.breakHere(BreakKind::kUnsupported,
                       "cannot rebuild " + describe(*v) + " after the graph (needed by the code that follows)");
    }
  }

  std::vector<NodeRef> outputs;
  /// While set, containers made during the trace are planned in full every time (no memo
  /// slots): for values only a failed run builds, so a successful run never meets a reference
  /// to a slot it did not fill.
  void setNoMemo(bool on) { noMemo_ = on; }
  /// Values made for planning only: kept alive so their addresses stay unique in memoOf_.
  void keep(ValueRef v) { keepAlive_.push_back(std::move(v)); }

 private:
  int outputIndex(const NodeRef& n) {
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i] == n) return static_cast<int>(i);
    outputs.push_back(n);
    return static_cast<int>(outputs.size()) - 1;
  }

  CompileContext& ctx_;
  GraphCallSpec& spec_;
  std::vector<Source>& roots_;
  std::unordered_map<Source, int, SourceHash> fetchIndex_;
  std::unordered_map<const Value*, int> memoOf_;
  std::vector<ValueRef> keepAlive_;
  bool noMemo_ = false;
};

// A function made in the frame, rebuilt from its code, the frame's cells and constant defaults.
OutputPlan::FunctionLocal functionLocal(CompileContext& ctx, const RootBreak& brk, int slot, const Value& fn) {
  OutputPlan::FunctionLocal f;
  f.slot = slot;
  f.code = fn.obj;
  const FunctionData& data = fn.as<FunctionData>();
  for (const auto& box : data.closure) {
    int found = -1;
    for (size_t i = 0; i < brk.locals.size(); ++i) {
      const ValueRef& c = brk.locals[i];
      if (c && c->kind == ValueKind::kCell && c->as<CellData>().box == box) found = static_cast<int>(i);
    }
    if (found < 0) ctx.breakHere(BreakKind::kUnsupported, "cannot rebuild function " + fn.name + " after the graph (its closure is not the frame's)");
    f.cellSlots.push_back(found);
  }
  for (const ValueRef& d : fn.items) {
    PyObjectRef c = concrete(d);
    if (!c) ctx.breakHere(BreakKind::kUnsupported, "cannot rebuild function " + fn.name + " after the graph (non-constant default)");
    f.defaults.push_back(c);
  }
  if (data.kwdefaults && !data.kwdefaults->items.empty())
    ctx.breakHere(BreakKind::kUnsupported, "cannot rebuild function " + fn.name + " after the graph (keyword defaults)");
  return f;
}

}  // namespace

OutputPlan planOutputs(CompileContext& ctx, Tracer& root, const ValueRef& returned,
                       const RootBreak* brk) {
  OutputPlan out;
  out.spec = std::make_unique<GraphCallSpec>();
  GraphCallSpec& spec = *out.spec;
  Planner planner(ctx, spec, out.roots);

  // Graph inputs first, in placeholder order.
  for (const auto& [node, source] : ctx.inputs()) spec.graphInputs.push_back(planner.fetch(source));

  if (brk == nullptr) {
    spec.results.push_back(planner.plan(returned));
  } else {
    for (const ValueRef& v : brk->stack) {
      if (v->isNull()) continue;
      spec.results.push_back(planner.plan(v));
      out.stores.push_back({OutputPlan::Store::Kind::kFast, -1, "__dynamo_s" + std::to_string(out.stackTemps)});
      ++out.stackTemps;
    }
    // Only locals the rest of the code may read are rebuilt and passed on: a dead value (a
    // resume function's spent ___stack arguments, a temporary) is neither guarded nor passed.
    const int nvar = root.bytecode().instructions.empty() ? 0 : static_cast<int>(bc::codeOptionsFrom(ctx.rootCode()).varnames.size());
    std::vector<std::vector<bool>> live = bc::liveLocals(root.bytecode(), nvar);
    out.liveLocals.assign(brk->locals.size(), true);
    for (int i = 0; i < nvar && i < static_cast<int>(brk->locals.size()); ++i)
      out.liveLocals[i] = live[brk->instruction][i];
    // super() reads the receiver without a LOAD_FAST: it stays live.
    const int receiver = superReceiverSlot(ctx.rootCode(), bc::codeOptionsFrom(ctx.rootCode()).localsPlusNames());
    if (receiver >= 0 && receiver < static_cast<int>(out.liveLocals.size())) out.liveLocals[receiver] = true;
    for (size_t i = 0; i < brk->locals.size(); ++i) {
      const ValueRef& v = brk->locals[i];
      if (!v || v->kind == ValueKind::kCell) continue;
      if (!out.liveLocals[i]) continue;
      if (v->kind == ValueKind::kFunction) {
        out.functions.push_back(functionLocal(ctx, *brk, static_cast<int>(i), *v));
        continue;
      }
      spec.results.push_back(planner.plan(v));
      out.stores.push_back({OutputPlan::Store::Kind::kFast, static_cast<int>(i), ""});
    }
  }
  // Side effects: attribute writes and container contents replayed by the CompiledGraph; cell and
  // global writes stored by the bytecode (the last write to each wins).
  std::vector<const SideEffect*> seenContainers;
  for (size_t k = 0; k < ctx.effects.size(); ++k) {
    const SideEffect& e = ctx.effects[k];
    switch (e.kind) {
      case SideEffect::Kind::kSetAttr: {
        EffectPlan p{EffectPlan::Kind::kSetAttr, planner.plan(e.target), e.name, planner.plan(e.value)};
        p.bodyBefore = e.bodyBefore;
        spec.effects.push_back(std::move(p));
        break;
      }
      case SideEffect::Kind::kListContents:
      case SideEffect::Kind::kDictContents: {
        // Every change is planned with the contents right after it: a successful run applies
        // the last one; a run that fails at some node applies the last one before that node.
        bool later = false;
        for (size_t j = k + 1; j < ctx.effects.size(); ++j)
          if (ctx.effects[j].kind == e.kind && ctx.effects[j].target == e.target) later = true;
        planner.keep(e.snapshot);
        planner.setNoMemo(later);  // a non-final snapshot is built only by a failed run
        EffectPlan p{e.kind == SideEffect::Kind::kListContents ? EffectPlan::Kind::kListContents
                                                                : EffectPlan::Kind::kDictContents,
                     planner.plan(e.target), "", planner.plan(e.snapshot)};
        planner.setNoMemo(false);
        p.bodyBefore = e.bodyBefore;
        p.final = !later;
        spec.effects.push_back(std::move(p));
        break;
      }
      case SideEffect::Kind::kGlobal: {
        // Replayed by the CompiledGraph on the frame's globals dict, in program order with the
        // other effects (so a write before a node that raises still happens, as in eager).
        bool later = false;
        for (size_t j = k + 1; j < ctx.effects.size(); ++j)
          if (ctx.effects[j].kind == e.kind && ctx.effects[j].name == e.name) later = true;
        ValueRef globalsDict = makeObject(ctx.frame().globals, Source::object(ctx.frame().globals, "globals()"));
        planner.keep(globalsDict);
        EffectPlan p{EffectPlan::Kind::kSetItem, planner.plan(globalsDict), e.name, planner.plan(e.value)};
        p.bodyBefore = e.bodyBefore;
        p.final = !later;
        spec.effects.push_back(std::move(p));
        break;
      }
      case SideEffect::Kind::kCell: {
        bool later = false;
        for (size_t j = k + 1; j < ctx.effects.size(); ++j)
          if (ctx.effects[j].kind == e.kind && ctx.effects[j].name == e.name && ctx.effects[j].slot == e.slot)
            later = true;
        if (later) break;
        spec.results.push_back(planner.plan(e.value));
        out.stores.push_back({OutputPlan::Store::Kind::kDeref, e.slot, e.name});
        break;
      }
    }
  }
  // For a run that fails part-way: which changes of a container follow each other, and which
  // effects need values only a finished run has.
  std::function<bool(const OutPlan&)> usesOutputs = [&](const OutPlan& p) {
    if (p.kind == OutPlan::Kind::kGraphOutput) return true;
    for (const OutPlan& c : p.children)
      if (usesOutputs(c)) return true;
    return false;
  };
  for (size_t k = 0; k < spec.effects.size(); ++k) {
    EffectPlan& p = spec.effects[k];
    p.usesOutputs = usesOutputs(p.target) || usesOutputs(p.value);
  }
  {
    // Effects in spec order match the SideEffects that made them (setattr and contents only).
    std::vector<const SideEffect*> made;
    for (const SideEffect& e : ctx.effects)
      if (e.kind != SideEffect::Kind::kCell) made.push_back(&e);
    for (size_t k = 0; k < spec.effects.size(); ++k) {
      if (spec.effects[k].kind == EffectPlan::Kind::kSetAttr) continue;
      for (size_t j = k + 1; j < spec.effects.size(); ++j)
        if (spec.effects[j].kind == spec.effects[k].kind && made[j]->target == made[k]->target &&
            made[j]->name == made[k]->name) {
          spec.effects[k].nextSameTarget = static_cast<int>(j);
          break;
        }
    }
  }
  spec.returnSingle = brk == nullptr && out.stores.empty();
  std::vector<Arg> outs;
  for (const NodeRef& n : planner.outputs) outs.push_back(Arg::node(n));
  spec.numOutputs = planner.outputs.size();
  ctx.graph.output(Arg::tuple(std::move(outs)));
  spec.nargs = static_cast<int>(out.roots.size());
  (void)root;
  return out;
}

// ---- emission ---------------------------------------------------------------------------------

namespace {

using Ins = bc::Instruction;

// Slot index in `names` (localsplus names of the code being emitted).
int slotOf(const std::vector<std::string>& names, const std::string& n) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == n) return static_cast<int>(i);
  return -1;
}

struct Emitter {
  bc::CodeOptions opts;
  std::vector<Ins> out;
  std::vector<std::string> origSlots;  // localsplus names of the original code
  std::vector<std::string> newSlots;   // localsplus names of the emitted code
  std::vector<int> prefixCells;        // original slots MAKE_CELL'd in the prologue
  int nfree = 0;

  int newSlot(int origSlot) const { return slotOf(newSlots, origSlots[origSlot]); }
  bool isFree(int origSlot) const { return origSlot >= static_cast<int>(origSlots.size()) - nfree; }
  bool isCelled(int origSlot) const {
    for (int s : prefixCells)
      if (s == origSlot) return true;
    return isFree(origSlot);
  }
  void emit(int op, int arg = 0) { out.push_back(Ins::make(op, arg)); }
  void loadRoot(const RootInfo& r) {
    if (r.kind == RootInfo::Kind::kObject) {
      out.push_back(bc::loadConst(opts, r.object));
    } else if (r.kind == RootInfo::Kind::kGlobal) {
      emit(LOAD_GLOBAL, opts.addName(r.name) << 1);
    } else if (isCelled(r.slot)) {
      emit(LOAD_DEREF, newSlot(r.slot));
    } else {
      emit(LOAD_FAST, newSlot(r.slot));
    }
  }
  void call(int nargs) {
    for (Ins& i : bc::callFunction(opts, nargs)) out.push_back(i);
  }
};

// Builds the resume code object that continues `bytecode` at instruction `target` with the given
// stack layout (true = NULL) and passed locals. New ref.
// `first` (may be empty) is passed before everything else: the receiver super() finds in slot 0.
PyObjectRef makeResumeCode(PyCodeObject* code, const bc::Bytecode& body, int target,
                           const std::vector<bool>& nullMask, const std::string& first, bool firstIsCell,
                           const std::vector<std::string>& passedLocals,
                           const std::vector<std::string>& passedCells, const SourceLocation& breakAt) {
  bc::CodeOptions orig = bc::codeOptionsFrom(code);
  std::vector<std::string> origSlots = orig.localsPlusNames();
  bc::CodeOptions opts = orig;
  // Stack arguments get names no slot of the continued code has (a resume of a resume function
  // has ___stackN slots of its own, which must not share a slot with the new ones).
  std::vector<std::string> stackNames;
  for (size_t i = 0; i < nullMask.size(); ++i) {
    if (nullMask[i]) continue;
    std::string name = "___stack" + std::to_string(i);
    for (int k = 1; slotOf(origSlots, name) >= 0; ++k) name = "___stack" + std::to_string(i) + "_" + std::to_string(k);
    stackNames.push_back(name);
  }
  std::vector<std::string> varnames;
  if (!first.empty()) varnames.push_back(first);
  for (const std::string& n : stackNames) varnames.push_back(n);
  for (const std::string& n : passedLocals) varnames.push_back(n);
  for (const std::string& n : passedCells) varnames.push_back(n);
  for (const std::string& n : orig.varnames)
    if (slotOf(varnames, n) < 0) varnames.push_back(n);
  opts.varnames = varnames;
  opts.argcount = static_cast<int>((first.empty() ? 0 : 1) + stackNames.size() + passedLocals.size() + passedCells.size());
  opts.posonlyargcount = 0;
  opts.kwonlyargcount = 0;
  opts.flags &= ~(CO_VARARGS | CO_VARKEYWORDS);
  opts.name = "<resume in " + orig.name + ">";
  opts.qualname = "<resume in " + orig.qualname + ">";
  std::vector<std::string> newSlots = opts.localsPlusNames();

  bc::Bytecode out = body;
  for (Ins& ins : out.instructions) {
    const bc::OpcodeInfo& info = bc::requireOpcode(ins.opcode);
    if (info.has(bc::kHasLocal)) {
      ins.arg = slotOf(newSlots, orig.varnames[ins.arg]);
    } else if (info.has(bc::kHasFree)) {
      ins.arg = slotOf(newSlots, origSlots[ins.arg]);
    }
  }
  std::vector<Ins> prologue;
  if (!orig.freevars.empty()) prologue.push_back(Ins::make(COPY_FREE_VARS, static_cast<int>(orig.freevars.size())));
  prologue.push_back(Ins::make(RESUME, 0));
  int k = 0;
  for (size_t i = 0; i < nullMask.size(); ++i) {
    if (nullMask[i]) {
      prologue.push_back(Ins::make(PUSH_NULL));
    } else {
      prologue.push_back(Ins::make(LOAD_FAST, slotOf(newSlots, stackNames[k++])));
    }
  }
  int jumpAt = static_cast<int>(prologue.size());
  prologue.push_back(bc::jumpTo(0));  // target fixed below
  for (Ins& i : prologue) {
    i.pos = body.instructions.empty() ? bc::Position{} : body.instructions[target].pos;
  }
  int shift = static_cast<int>(prologue.size());
  out.insert(0, prologue);
  out.instructions[jumpAt].target = target + shift;
  PyObjectRef result = PyObjectRef::steal(bc::assemble(out, opts).release());

  ResumeInfo info;
  info.originalName = orig.qualname;
  info.breakAt = breakAt;
  info.rootCode = PyObjectRef::borrow(reinterpret_cast<PyObject*>(code));
  if (const ResumeInfo* parent = resumeInfo(code)) {
    info.firstArgName = parent->firstArgName;
    info.rootCode = parent->rootCode;
  } else if (orig.argcount > 0 && !orig.varnames.empty()) {
    info.firstArgName = orig.varnames[0];
  }
  for (const std::string& n : passedCells) info.preCelledSlots.push_back(slotOf(newSlots, n));
  if (!first.empty() && firstIsCell) info.preCelledSlots.push_back(slotOf(newSlots, first));
  resumeRegistry()[reinterpret_cast<PyCodeObject*>(result.get())] = ResumeEntry{result, info};
  return result;
}

// How many values an instruction pops (what it pushes is that plus its net effect). Exact for
// the instructions the tracer can break at; others pop what a one-result instruction would.
int stackPops(const Ins& ins) {
  const int a = ins.arg;
  switch (ins.opcode) {
    case CALL: return a + 2;  // [NULL|self, fn, args]
    case STORE_ATTR: return 2;
    case STORE_SUBSCR: return 3;
    case DELETE_SUBSCR: return 2;
    case STORE_GLOBAL:
    case STORE_DEREF:
    case STORE_FAST:
    case POP_TOP:
    case LIST_APPEND:
    case SET_ADD:
    case LIST_EXTEND:
    case SET_UPDATE:
    case DICT_UPDATE:
    case DICT_MERGE:
    case UNPACK_SEQUENCE:
    case UNPACK_EX:
    case GET_ITER:
    case LOAD_ATTR:
#ifdef LOAD_METHOD
    case LOAD_METHOD:
#endif
    case UNARY_NEGATIVE:
    case UNARY_NOT:
    case UNARY_INVERT:
      return 1;
    case MAP_ADD:
    case BINARY_OP:
    case BINARY_SUBSCR:
    case COMPARE_OP:
    case IS_OP:
    case CONTAINS_OP:
      return 2;
    case BUILD_TUPLE:
    case BUILD_LIST:
    case BUILD_SET:
    case BUILD_STRING:
    case BUILD_SLICE:
      return a;
    case BUILD_MAP: return 2 * a;
    case BUILD_CONST_KEY_MAP: return a + 1;
    case CALL_FUNCTION_EX: return 3 + (a & 1);
    case FORMAT_VALUE: return (a & 0x04) ? 2 : 1;
    case LOAD_GLOBAL:
    case LOAD_FAST:
    case LOAD_DEREF:
    case LOAD_CLOSURE:
    case LOAD_CONST:
      return 0;
    default: {
      int effect = bc::stackEffect(ins.opcode, ins.arg, false);
      return effect <= 0 ? 1 - effect : 0;
    }
  }
}

bool isCondJump(int op) {
  switch (op) {
#ifdef POP_JUMP_FORWARD_IF_FALSE
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_FORWARD_IF_TRUE:
    case POP_JUMP_BACKWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_TRUE:
#endif
#ifdef POP_JUMP_IF_FALSE
    case POP_JUMP_IF_FALSE:
    case POP_JUMP_IF_TRUE:
#endif
      return true;
    default:
      return false;
  }
}

bool isOrPop(int op) {
#ifdef JUMP_IF_FALSE_OR_POP
  return op == JUMP_IF_FALSE_OR_POP || op == JUMP_IF_TRUE_OR_POP;
#else
  (void)op;
  return false;
#endif
}

// The prologue of the transformed code: the original's instructions up to and including RESUME,
// slots remapped (cells made there are remembered). Returns RESUME's index in the original.
size_t emitPrologue(Emitter& e, const bc::Bytecode& body) {
  size_t prefixEnd = 0;
  for (; prefixEnd < body.instructions.size(); ++prefixEnd) {
    Ins ins = body.instructions[prefixEnd];
    if (ins.opcode == MAKE_CELL) {
      e.prefixCells.push_back(ins.arg);
      ins.arg = e.newSlot(ins.arg);
    }
    ins.target = -1;
    ins.handler = {};
    e.out.push_back(ins);
    if (ins.opcode == RESUME) break;
  }
  DYNAMO_INTERNAL_ASSERT(prefixEnd < body.instructions.size(), "no RESUME in the prologue");
  return prefixEnd;
}

// Stores one value the graph computed into the frame (a local, a cell, a global).
void emitStore(Emitter& e, const OutputPlan::Store& s) {
  switch (s.kind) {
    case OutputPlan::Store::Kind::kFast:
      if (s.slot >= 0) e.emit(STORE_FAST, e.newSlot(s.slot));
      else e.emit(STORE_FAST, slotOf(e.newSlots, s.name));
      break;
    case OutputPlan::Store::Kind::kDeref:
      e.emit(STORE_DEREF, e.newSlot(s.slot));
      break;
    case OutputPlan::Store::Kind::kGlobal:
      e.emit(STORE_GLOBAL, e.opts.addName(s.name));
      break;
  }
}

// Makes the functions the traced code defined (closures included) and stores them in their slots.
void emitFunctionLocals(Emitter& e, const OutputPlan& plan) {
  for (const OutputPlan::FunctionLocal& f : plan.functions) {
    int flags = 0;
    if (!f.defaults.empty()) {
      for (const PyObjectRef& d : f.defaults) e.out.push_back(bc::loadConst(e.opts, d.get()));
      e.emit(BUILD_TUPLE, static_cast<int>(f.defaults.size()));
      flags |= 0x01;
    }
    if (!f.cellSlots.empty()) {
      for (int c : f.cellSlots) e.emit(LOAD_CLOSURE, e.newSlot(c));
      e.emit(BUILD_TUPLE, static_cast<int>(f.cellSlots.size()));
      flags |= 0x08;
    }
    e.out.push_back(bc::loadConst(e.opts, f.code.get()));
    e.emit(MAKE_FUNCTION, flags);
    e.emit(STORE_FAST, e.newSlot(f.slot));
  }
}

// What a resume function receives at a break: super()'s receiver first (so a zero-argument
// super() in it finds it), then the live non-cell locals, then every cell (as a cell object).
struct LiveValues {
  std::string first;      ///< super()'s receiver, "" when none
  bool firstIsCell = false;
  int firstSlot = -1;     ///< its original slot, -1 when none
  std::vector<std::string> passedLocals, passedCells;  ///< names
  std::vector<int> localSlots, cellSlots;              ///< their original slots
};

LiveValues liveAtBreak(const Emitter& e, PyCodeObject* code, const RootBreak& brk, const OutputPlan& plan) {
  LiveValues live;
  // super()'s receiver goes first, so zero-argument super() in the resume function finds it.
  int firstSlot = superReceiverSlot(code, e.origSlots);
  if (firstSlot >= 0 && (firstSlot >= static_cast<int>(brk.locals.size()) || !brk.locals[firstSlot] ||
                         e.isFree(firstSlot)))
    firstSlot = -1;
  live.firstSlot = firstSlot;
  if (firstSlot >= 0) {
    live.first = e.origSlots[firstSlot];
    live.firstIsCell = brk.locals[firstSlot]->kind == ValueKind::kCell;
  }
  for (size_t i = 0; i < brk.locals.size(); ++i) {
    const ValueRef& v = brk.locals[i];
    if (!v || static_cast<int>(i) == firstSlot) continue;
    if (v->kind != ValueKind::kCell && i < plan.liveLocals.size() && !plan.liveLocals[i]) continue;
    if (v->kind == ValueKind::kCell) {
      if (e.isFree(static_cast<int>(i))) continue;
      live.passedCells.push_back(e.origSlots[i]);
      live.cellSlots.push_back(static_cast<int>(i));
    } else {
      live.passedLocals.push_back(e.origSlots[i]);
      live.localSlots.push_back(static_cast<int>(i));
    }
  }
  return live;
}

// The emitted code object: instructions without a position get `pos`.
PyObjectRef assembleAt(Emitter& e, const bc::Position& pos) {
  for (Ins& i : e.out)
    if (i.pos.line < 0) i.pos = pos;
  bc::Bytecode result;
  result.instructions = std::move(e.out);
  return PyObjectRef::steal(bc::assemble(result, e.opts).release());
}

}  // namespace

PyObjectRef emitCode(CompileContext& ctx, Tracer& root, PyCodeObject* code, const OutputPlan& plan,
                     PyObject* compiledGraph, const RootBreak* brk) {
  const bc::Bytecode& body = root.bytecode();
  Emitter e;
  e.opts = bc::codeOptionsFrom(code);
  e.origSlots = e.opts.localsPlusNames();
  e.nfree = static_cast<int>(e.opts.freevars.size());
  // Temps for the stack values at a break.
  for (int i = 0; i < plan.stackTemps; ++i) e.opts.addVarname("__dynamo_s" + std::to_string(i));
  e.newSlots = e.opts.localsPlusNames();

  // The prologue: everything up to and including RESUME, slots remapped.
  const size_t prefixEnd = emitPrologue(e, body);

  // The call of the compiled graph.
  e.emit(PUSH_NULL);
  e.out.push_back(bc::loadConst(e.opts, compiledGraph));
  for (const Source& r : plan.roots) e.loadRoot(rootInfoOf(code, r, e.origSlots));
  e.call(static_cast<int>(plan.roots.size()));

  if (brk == nullptr) {
    if (!plan.stores.empty()) {
      // (ret, w1, ..., wk): keep ret on top, store each write beneath it.
      e.emit(UNPACK_SEQUENCE, static_cast<int>(plan.stores.size()) + 1);
      for (const OutputPlan::Store& s : plan.stores) {
        e.emit(SWAP, 2);
        emitStore(e, s);
      }
    }
    e.emit(RETURN_VALUE);
  } else {
    e.emit(UNPACK_SEQUENCE, static_cast<int>(plan.stores.size()));
    for (const OutputPlan::Store& s : plan.stores) emitStore(e, s);
    emitFunctionLocals(e, plan);

    const Ins& breakIns = body.instructions[brk->instruction];
    // Live values: non-cell locals that are bound, and every cell (passed as a cell object).
    const LiveValues live = liveAtBreak(e, code, *brk, plan);
    // Stack temps in order; NULLs are re-pushed.
    std::vector<int> tempOf(brk->stack.size(), -1);
    int t = 0;
    for (size_t i = 0; i < brk->stack.size(); ++i)
      if (!brk->stack[i]->isNull()) tempOf[i] = t++;
    auto loadStack = [&](size_t i) {
      if (tempOf[i] < 0) e.emit(PUSH_NULL);
      else e.emit(LOAD_FAST, slotOf(e.newSlots, "__dynamo_s" + std::to_string(tempOf[i])));
    };
    auto makeResumeFn = [&](int target, const std::vector<bool>& nullMask) {
      const SourceLocation breakAt = brk->info.userStack.empty() ? brk->info.where : brk->info.userStack.front();
      PyObjectRef rc = makeResumeCode(code, body, target, nullMask, live.first, live.firstIsCell, live.passedLocals,
                                      live.passedCells, breakAt);
      if (e.nfree > 0) {
        for (int k = 0; k < e.nfree; ++k) e.emit(LOAD_CLOSURE, static_cast<int>(e.newSlots.size()) - e.nfree + k);
        e.emit(BUILD_TUPLE, e.nfree);
        e.out.push_back(bc::loadConst(e.opts, rc.get()));
        e.emit(MAKE_FUNCTION, 0x08);
      } else {
        e.out.push_back(bc::loadConst(e.opts, rc.get()));
        e.emit(MAKE_FUNCTION, 0);
      }
    };
    auto loadFirst = [&] {
      if (live.firstSlot < 0) return 0;
      e.emit(live.firstIsCell ? LOAD_CLOSURE : LOAD_FAST, e.newSlot(live.firstSlot));
      return 1;
    };
    auto loadLive = [&] {
      for (int s : live.localSlots) e.emit(LOAD_FAST, e.newSlot(s));
      for (int s : live.cellSlots) e.emit(LOAD_CLOSURE, e.newSlot(s));
      return static_cast<int>(live.localSlots.size() + live.cellSlots.size());
    };
    const int depth = static_cast<int>(brk->stack.size());
    if (isCondJump(breakIns.opcode) || isOrPop(breakIns.opcode)) {
      // Branch on the real value, then one resume call per side.
      loadStack(depth - 1);
      size_t jumpIndex = e.out.size();
      Ins j = breakIns;
      j.handler = {};
      e.out.push_back(j);
      auto resumeBranch = [&](int target, int keep) {
        std::vector<bool> mask;
        for (int i = 0; i < keep; ++i) mask.push_back(brk->stack[i]->isNull());
        e.emit(PUSH_NULL);
        makeResumeFn(target, mask);
        int n = loadFirst();
        for (int i = 0; i < keep; ++i)
          if (!brk->stack[i]->isNull()) {
            loadStack(i);
            ++n;
          }
        n += loadLive();
        e.call(n);
        e.emit(RETURN_VALUE);
      };
      resumeBranch(brk->instruction + 1, depth - 1);
      e.out[jumpIndex].target = static_cast<int>(e.out.size());
      resumeBranch(breakIns.target, isOrPop(breakIns.opcode) ? depth : depth - 1);
    } else {
      DYNAMO_INTERNAL_ASSERT(!breakIns.isJump(), "a break at a jump that is not conditional");
      int effect = bc::stackEffect(breakIns.opcode, breakIns.arg, false);
      int consumed = std::min(depth, stackPops(breakIns));
      int below = depth - consumed;
      // A call's result replaces [NULL|self, fn, args] (3.11: PRECALL and CALL together).
      int after = breakIns.opcode == CALL ? below + 1 : depth + effect;
      const bool fallsThrough = !bc::requireOpcode(breakIns.opcode).has(bc::kNoFallthrough);
      if (!fallsThrough) {
        // raise / reraise: nothing runs after it in this frame.
        for (int i = 0; i < depth; ++i) loadStack(i);
        Ins copy = breakIns;
        copy.handler = {};
        e.out.push_back(copy);
        return assembleAt(e, body.instructions[brk->instruction].pos);
      }
      std::vector<bool> mask;
      for (int i = 0; i < below; ++i) mask.push_back(brk->stack[i]->isNull());
      for (int i = below; i < after; ++i) mask.push_back(false);
      e.emit(PUSH_NULL);
      makeResumeFn(brk->instruction + 1, mask);
      int n = loadFirst();
      for (int i = 0; i < below; ++i)
        if (!brk->stack[i]->isNull()) {
          loadStack(i);
          ++n;
        }
      for (int i = below; i < depth; ++i) loadStack(i);
      if (breakIns.opcode == CALL) {
        std::vector<std::string> kw;
        if (brk->kwNames) {
          for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(brk->kwNames->py()); ++k)
            kw.push_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(brk->kwNames->py(), k)));
        }
        for (Ins& i : bc::callFunction(e.opts, breakIns.arg, kw)) e.out.push_back(i);
      } else {
        Ins copy = breakIns;
        copy.handler = {};
        e.out.push_back(copy);
      }
      n += after - below;
      n += loadLive();
      e.call(n);
      e.emit(RETURN_VALUE);
    }
  }
  // Positions: everything at the function's first line, or the break's line.
  (void)ctx;
  return assembleAt(e, body.instructions[brk ? brk->instruction : prefixEnd].pos);
}

}  // namespace dynamo::core::interp
