// The symbolic interpreter: walks a code object's bytecode with Values instead of objects,
// recording tensor operations into a graph, guards on everything it read from the frame, and
// side effects to replay after the graph.
//
//   CompileContext (one per compile)          Tracer (one per frame: the root, or an inlined call)
//     GraphBuilder graph                        stack, locals, instruction pointer
//     GuardSetBuilder guards                    run() -> return Value, or throws GraphBreak
//     graph inputs (node, source)               rootBreak: the state where the root stopped
//     side effects, attribute overlay
//
// A GraphBreak thrown while tracing an inlined call unwinds to the root Tracer. The compile is
// then restarted with that root instruction marked as a break point (the graph builder is
// append-only, so the partial inline cannot be undone).
#pragma once

#include <Python.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "dynamo/common/error.h"
#include "dynamo/core/bytecode.h"
#include "dynamo/core/guards.h"
#include "value.h"

namespace dynamo::core::interp {

/// Graph-break kinds, from break_kinds.def.
enum class BreakKind {
#define DYNAMO_BREAK(Name, slug, explanation, hint) k##Name,
#include "dynamo/core/break_kinds.def"
#undef DYNAMO_BREAK
};
const char* breakSlug(BreakKind kind);
const char* breakExplanation(BreakKind kind);
const char* breakHint(BreakKind kind);

/// Thrown when the code cannot be captured at the current instruction.
struct GraphBreak {
  BreakKind kind;                        ///< what kind of break
  std::string detail;                    ///< the specific reason: "call to print()"
  SourceLocation where;                  ///< innermost user location
  std::vector<SourceLocation> userStack; ///< user frames, outermost first
  bool inlined = false;                  ///< raised inside an inlined call (restart needed)
  bool wholeFrame = false;               ///< the frame must run as Python (it reads its own frame)
  bool rootFrame = false;                ///< with wholeFrame: the root frame itself, even from an inlined call
};

/// A change to an object outside the graph, replayed after the graph runs, in order.
struct SideEffect {
  enum class Kind { kSetAttr, kListContents, kDictContents, kGlobal, kCell };
  Kind kind;
  ValueRef target;    ///< kSetAttr: object; kList/DictContents: the container
  std::string name;   ///< kSetAttr: attribute; kGlobal: name
  int slot = -1;      ///< kCell: the frame slot of the cell
  ValueRef value;     ///< kSetAttr / kGlobal / kCell: the new value
  size_t bodyBefore = 0;  ///< graph call nodes recorded before it (its place in program order)
  ValueRef snapshot;      ///< kList/DictContents: the container's contents right after it
};

/// Options of one compile.
struct TraceOptions {
  int maxInlineDepth = 64;          ///< nested inlined calls before giving up
  std::map<int, GraphBreak> forcedBreaks;  ///< root instructions to break at (restarts), why
  std::vector<std::string> noInlinePrefixes;  ///< files whose functions are never traced into
  /// Dynamic-shape policy and history of the code being compiled (dynamic.h); null: all static.
  std::shared_ptr<class DynamicState> dynamic;
  /// Int and float inputs the policy makes dynamic become kSymInt / kSymFloat values
  /// (sym_values.h); off for a retrace after a graph break that a symbolic value may have caused.
  bool symbolicInts = true;
  /// Input dimensions (source name, dim) that get a symbol of their own instead of sharing one
  /// with an equal size (duck sizing): set for a retrace after a shared symbol was specialised
  /// (CompileContext::duckSplit), so that only the dimension the trace needed is pinned.
  std::set<std::pair<std::string, int>> noDuck;
};

/// Everything one compile of one frame shares across the root and inlined Tracers.
class Tracer;

class CompileContext {
 public:
  CompileContext(const FrameValues& frame, PyCodeObject* rootCode, TraceOptions options);
  /// The compile being traced on this thread (ActiveCompile; for concrete(), which has no
  /// context), or null.
  static CompileContext* current();

  GraphBuilder graph;               ///< the graph being recorded
  GuardSetBuilder guards;           ///< guards on what was read
  std::vector<SideEffect> effects;  ///< side effects, in program order
  TraceOptions options;

  /// Wraps a Python object read from the frame through `source`: tensors become graph inputs,
  /// constants constants, other objects kObject; installs the guards that make the wrapping valid.
  ValueRef wrap(PyObject* obj, const Source& source, bool guarded = true);
  /// Records a side effect at this point of the program (stamps its place among the graph's
  /// nodes and, for container contents, a snapshot of the contents now).
  void recordEffect(SideEffect::Kind kind, ValueRef target, std::string name, int slot, ValueRef value);
  /// Records that the contents of an external list or dict changed (marks it mutated).
  void recordContents(const ValueRef& container);
  /// Adds a guard created at the current user location.
  void guard(const Source& source, LeafGuardPtr leaf);

  /// The frame's values (root Tracer).
  const FrameValues& frame() const { return frame_; }
  PyCodeObject* rootCode() const { return rootCode_; }

  /// Placeholders in order, each with its source.
  const std::vector<std::pair<NodeRef, Source>>& inputs() const { return inputs_; }
  /// Attribute values written during tracing, by (object identity, name), so reads see writes.
  std::map<std::pair<PyObject*, std::string>, ValueRef> attrOverlay;
  /// Cell boxes for real cell objects met during the trace (one box per cell).
  std::unordered_map<PyObject*, std::shared_ptr<CellBox>> cellBoxes;
  /// Values already made for an object reached through a source (identity kept).
  std::unordered_map<PyObject*, ValueRef> byIdentity;
  /// Symbols of dynamic sizes and the guards on them (dynamic.cpp).
  sym::ShapeEnv shapes;
  /// Where each symbol is read at run time: (input tensor source, dim), defining one first.
  std::vector<std::vector<std::pair<Source, int>>> symbolSources;
  /// Dimensions of duck-sized symbols this trace specialised (several dimensions shared the
  /// symbol): the compile traces again with them apart (TraceOptions::noDuck); none is kept
  /// static for later compiles by this trace.
  std::vector<std::pair<std::string, int>> duckSplit;
  /// kSymInt values of int inputs, by source (one symbol and one placeholder per source).
  std::unordered_map<Source, ValueRef, SourceHash> symIntInputs;
  /// kSymFloat values of float inputs, by source (one placeholder per source).
  std::unordered_map<Source, ValueRef, SourceHash> symFloatInputs;
  /// Float inputs whose value the trace needed: guarded by value (EQUALS_MATCH) from then on.
  std::set<std::string> specialisedFloats;
  /// kSymInt and kSymFloat values made in this trace (a break then retraces without them:
  /// TraceOptions::symbolicInts).
  int symIntsMade = 0;
  /// While probing shapes (dynamic.cpp): the symbol values at which exampleOf() evaluates a
  /// kSymInt; null otherwise (the example values).
  const std::vector<int64_t>* probeValues = nullptr;
  /// While probing whether a call's result depends on its float arguments (dynamic.cpp): the
  /// value exampleOf() gives each kSymFloat it holds; null otherwise (the example values).
  const std::map<const Value*, double>* floatProbeValues = nullptr;
  /// Adds `obj`, read through `source`, as a graph input that is not a tensor (a symbolic int or float).
  NodeRef addScalarInput(PyObject* obj, const Source& source);
  /// Tensor Values made for graph nodes (inputs and call results), so that the symbolic sizes
  /// they end the trace with can go into the nodes' meta (withSymShapes, dynamic.cpp).
  std::vector<ValueRef> nodeTensors;
  /// Notes for the compile record: which dimensions are dynamic or specialised, and why.
  std::vector<std::string> dynamicNotes;
  /// The real tensors behind the placeholders, in order (example inputs for backends).
  std::vector<PyObjectRef> realInputs;
  /// Whether torch grad mode is on at this point of the trace.
  bool gradEnabled = true;
  /// Grad mode when the frame was entered (the GRAD_MODE guard holds it on every call).
  bool initialGradEnabled = true;
  /// The graph switches grad mode (set_grad_enabled nodes): a failing run must switch it back.
  bool switchesGradMode = false;
  /// An autocast block open at this point of the trace (autocast.h): its effective settings.
  struct AutocastBlock {
    std::string device;         ///< "cpu" or "cuda"
    PyObjectRef dtype;          ///< the torch.dtype it casts to
    bool enabled = false;       ///< whether it turns autocast on (or off) for the device
    bool cacheEnabled = false;  ///< torch.is_autocast_cache_enabled() inside it
  };
  /// The autocast blocks open now, outermost first.
  std::vector<AutocastBlock> autocastBlocks;
  /// The graph enters autocast or inference-mode blocks: a failing run must leave them
  /// (graph_call.cpp).
  bool usesContextBlocks = false;
  /// The AUTOCAST guard (the state the frame is entered with) is installed.
  bool autocastGuarded = false;
  /// Whether autocast was on when the frame was entered: -1 not read yet, 0 or 1.
  int enteredUnderAutocast = -1;
  /// torch.inference_mode blocks open now (inference_mode.h).
  int inferenceBlocks = 0;
  /// Whether inference mode is on at this point of the trace (meaningful once the entry mode is
  /// read: enteredInferenceMode >= 0).
  bool inferenceMode = false;
  /// Whether inference mode was on when the frame was entered (INFERENCE_MODE guard): -1 not
  /// read yet, 0 or 1.
  int enteredInferenceMode = -1;
  /// The user location of the instruction being traced, and the stack of inlined calls.
  std::vector<SourceLocation> userStack;
  SourceLocation here() const { return userStack.empty() ? SourceLocation{} : userStack.back(); }
  /// Node metadata for a node created now.
  NodeMeta metaHere(PyObject* example) const;
  /// The Tracers of the root and the inlined calls being traced, outermost first.
  std::vector<const Tracer*> tracers;
  /// Records `fn(*args, **kwargs)` as a graph node (call_function, or call_method when method is
  /// non-empty), computing the result's meta example by running the call on meta tensors.
  ValueRef recordCall(PyObject* fn, const std::string& method, const std::vector<ValueRef>& args,
                      const std::vector<std::pair<std::string, ValueRef>>& kwargs);

  [[noreturn]] void breakHere(BreakKind kind, std::string detail) const;
  /// A break after which the frame cannot be resumed in pieces (locals(), eval, exec).
  /// rootFrame: the root frame is the one read, even when the break is inside an inlined call
  /// (sys._getframe(1) in inspect.currentframe()).
  [[noreturn]] void breakWholeFrame(std::string detail, bool rootFrame = false) const;

 private:
  FrameValues frame_;
  PyCodeObject* rootCode_;
  std::vector<std::pair<NodeRef, Source>> inputs_;
  ValueRef wrapTensor(PyObject* obj, const Source& source);
};

/// Makes `ctx` CompileContext::current() for its lifetime (scopes nest).
class ActiveCompile {
 public:
  explicit ActiveCompile(CompileContext& ctx);
  ~ActiveCompile();
  ActiveCompile(const ActiveCompile&) = delete;
  ActiveCompile& operator=(const ActiveCompile&) = delete;

 private:
  CompileContext* previous_;
};

/// Where the root Tracer stopped at a graph break: the state *before* the instruction.
struct RootBreak {
  GraphBreak info;                 ///< why
  int instruction = -1;            ///< index of the breaking instruction in the root code
  std::vector<ValueRef> stack;     ///< the stack before it
  std::vector<ValueRef> locals;    ///< the locals before it
  ValueRef kwNames;                ///< pending KW_NAMES (3.11/3.12 calls), or null
  bool needsRestart = false;       ///< the graph holds nodes of a partial inline
};

/// Interprets one code object.
class Tracer {
 public:
  /// The root frame: locals come from ctx.frame().
  Tracer(CompileContext& ctx, PyCodeObject* code, PyObject* globals, PyObject* builtins);
  /// An inlined call of `function` (a kObject function or a kFunction) with bound locals.
  Tracer(CompileContext& ctx, Tracer& parent, PyCodeObject* code, PyObject* globals,
         std::vector<ValueRef> locals, std::vector<std::shared_ptr<CellBox>> closure);

  /// Runs to RETURN_VALUE and returns the value. At the root, a graph break stops the run and is
  /// described by rootBreak() (and the return value is null); in an inlined call it propagates.
  ValueRef run();
  /// Set when the root stopped at a break.
  const RootBreak* rootBreak() const { return rootBreak_ ? rootBreak_.get() : nullptr; }
  /// The decoded instructions.
  const bytecode::Bytecode& bytecode() const { return bc_; }
  /// True when instruction i lies inside a loop body (between a backward jump and its target).
  bool insideLoop(int i) const;

  /// True when the instruction being traced runs under an exception handler of the user's
  /// (try/except, try/finally, or a `with` whose manager is not a traced grad-mode one): an
  /// error raised by graph code there must reach that handler, so such code is not captured.
  bool underUserHandler() const;
  /// True (and guarded) when this is torch 2.x's Module._call_impl and its handler can only
  /// re-raise: no forward hook registered with always_call=True (tracer.cpp).
  bool isNoOpModuleCallHandler() const;

  /// Generator mode (call_constructs.cpp): runs to the next YIELD_VALUE and returns the value
  /// yielded, or null with *exhausted set once the generator has returned.
  ValueRef resume(bool* exhausted);
  /// What the generator (or function) returned once it is done; null before.
  const ValueRef& returnedValue() const { return returned_; }

  // Used by the call machinery (tracer_calls.cpp).
  CompileContext& ctx() { return ctx_; }
  /// super() with no arguments in the code being traced: super(__class__, first argument).
  ValueRef zeroArgSuper();
  int depth() const { return depth_; }
  PyObject* globals() const { return globals_; }

 private:
  void step(const bytecode::Instruction& ins);
  // The opcode families of step(), one switch each (tracer.cpp); true when handled.
  bool stepSlots(const bytecode::Instruction& ins);
  bool stepCalls(const bytecode::Instruction& ins);
  bool stepOperators(const bytecode::Instruction& ins);
  bool stepContainers(const bytecode::Instruction& ins);
  bool stepIteration(const bytecode::Instruction& ins);
  bool stepControl(const bytecode::Instruction& ins);
  SourceLocation locationOf(const bytecode::Instruction& ins) const;
  ValueRef pop();
  /// pop() without wrapping a kLazy value (for moves that do not look at it).
  ValueRef popRaw();
  ValueRef& top(int n = 1);
  /// The wrapped Value of a kLazy (the same one each time); other values as they are.
  const ValueRef& realize(ValueRef& v);
  std::vector<ValueRef> popN(int n);
  void push(ValueRef v) { stack_.push_back(std::move(v)); }
  void jumpTo(int target) { next_ = target; }
  bool truthiness(const ValueRef& v);
  bool symbolicShapeRead(const ValueRef& tensor);
  ValueRef loadGlobal(const std::string& name);
  ValueRef loadName(const bytecode::Instruction& ins);
  void doCall(int nargs);
  void doBinary(int nbOp);
  void doCompare(int cmp);
  void doForIter(const bytecode::Instruction& ins);
  void doSend(const bytecode::Instruction& ins);
  void doMakeFunction(int flags);
  void doUnpack(int count);
  void doFormat(int flags);
  // Bodies of the longer cases of stepOperators() and stepControl().
  void doIsOp(int arg);
  void doContains(int arg);
  void doStoreSubscr();
  void doDeleteSubscr();
  void doBuildString(int count);
  void doImportName(int nameIndex);
  void doBeforeWith();
  void initRootLocals();
  bool preCelled(int slot) const;

  CompileContext& ctx_;
  Tracer* parent_;
  PyCodeObject* code_;  // borrowed ref (the frame or the inlined function holds it)
  PyObject* globals_;   // borrowed ref
  PyObject* builtins_;  // borrowed ref
  bytecode::Bytecode bc_;
  std::vector<std::string> localNames_;
  std::vector<ValueRef> stack_;
  std::vector<ValueRef> locals_;
  std::vector<std::shared_ptr<CellBox>> closure_;
  ValueRef kwNames_;
  ValueRef returned_;
  int ip_ = 0;
  int next_ = 0;
  int depth_ = 0;
  bool done_ = false;
  std::vector<std::pair<int, int>> loops_;  // (target, jump) of backward jumps
  std::unique_ptr<RootBreak> rootBreak_;
  bool generator_ = false;  // resume(): YIELD_VALUE suspends
  bool suspended_ = false;  // resume(): a value was yielded
  bool started_ = false;    // resume(): the first resume happened
  ValueRef yielded_;
  mutable int lastLine_ = -1;              // locationOf's one-line cache
  mutable SourceLocation lastLocation_;
  std::unordered_map<const Value*, ValueRef> realized_;  // kLazy -> its wrapped Value
  std::vector<ValueRef> lazyKeep_;                       // keeps realized_'s keys alive
};

/// Index of `key` among a kDict's keys, or -1 (Python equality).
int dictIndex(const ValueRef& d, const PyObjectRef& key);
/// d[key] = value on a kDict: replaces an equal key in place, else appends.
void setDictItem(const ValueRef& d, const PyObjectRef& key, ValueRef value);

/// The source of another module's globals dict (a held object), for globals read by inlined code.
Source moduleGlobalsSource(PyObject* globals);
/// The module whose __dict__ is `globals`, or null (code run by exec). Borrowed.
PyObject* moduleOfGlobals(PyObject* globals);

/// Calls `fn` with `args`/`kwargs` symbolically from `tracer` (inlining user code, recording torch
/// ops, evaluating builtins on constants). tracer_calls.cpp.
ValueRef callValue(Tracer& tracer, const ValueRef& fn, std::vector<ValueRef> args,
                   std::vector<std::pair<std::string, ValueRef>> kwargs);
/// getattr(v, name) symbolically. tracer_attrs.cpp.
ValueRef getAttr(Tracer& tracer, const ValueRef& v, const std::string& name);
/// setattr(v, name, value): recorded as a side effect.
void setAttr(CompileContext& ctx, const ValueRef& v, const std::string& name, ValueRef value);
/// v[index] symbolically.
ValueRef getItem(CompileContext& ctx, const ValueRef& v, const ValueRef& index);
/// The Python object for a value known exactly (constants, objects, containers of those), or
/// null when it is symbolic. New ref.
PyObjectRef concrete(const ValueRef& v);
/// A meta example / constant for calling torch on meta tensors: tensors -> meta examples,
/// containers recursively, constants as they are. New ref; throws GraphBreak when impossible.
PyObjectRef exampleOf(CompileContext& ctx, const ValueRef& v);
/// The graph argument for a value; throws GraphBreak when it cannot be one.
Arg argOf(CompileContext& ctx, const ValueRef& v);
/// Wraps a call result (meta example) coming out of node `node` into Values.
ValueRef wrapResult(CompileContext& ctx, NodeRef node, PyObject* example, PyObject* device);
/// Iterates a value: the items of a tuple/list/dict keys/range/module container. Throws
/// GraphBreak for what cannot be unrolled.
std::vector<ValueRef> iterateValue(CompileContext& ctx, const ValueRef& v);

}  // namespace dynamo::core::interp
