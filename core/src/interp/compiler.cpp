// The frame compiler (see compiler.h): trace -> (restart on a failed inline) -> plan outputs ->
// build the graph -> backend -> emit code -> cache entry, with fallbacks that never break the
// user's program when suppress_errors is on.
#include "dynamo/core/compiler.h"

#include <optional>
#include <chrono>

#include "autocast.h"
#include "codegen.h"
#include "dynamo/core/graph_fx.h"
#include "dynamo/core/backend.h"
#include "dynamo/core/compile_sink.h"
#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_serializer.h"
#include "dynamic.h"
#include "graph_call.h"
#include "torch_api.h"
#include "tracer.h"

namespace dynamo::core {

std::vector<BreakKindRow> breakKinds() {
  return {
#define DYNAMO_BREAK(Name, slug, explanation, hint) {slug, explanation, hint},
#include "dynamo/core/break_kinds.def"
#undef DYNAMO_BREAK
  };
}

namespace {
thread_local PyObject* backendCause = nullptr;  // strong ref
thread_local const Graph* capturedNow = nullptr;  // borrowed: the graph before the passes

// Sets capturedGraphOfCurrentCompile() for the duration of a backend's compile.
class CapturedGraphScope {
 public:
  explicit CapturedGraphScope(const Graph* g) : previous_(capturedNow) { capturedNow = g; }
  ~CapturedGraphScope() { capturedNow = previous_; }
  CapturedGraphScope(const CapturedGraphScope&) = delete;
  CapturedGraphScope& operator=(const CapturedGraphScope&) = delete;

 private:
  const Graph* previous_;
};
}  // namespace

const Graph* capturedGraphOfCurrentCompile() { return capturedNow; }

void setBackendFailureCause(PyObject* exception) {
  Py_XDECREF(backendCause);
  backendCause = exception;
}

PyObjectRef takeBackendFailureCause() {
  PyObject* c = backendCause;
  backendCause = nullptr;
  return PyObjectRef::steal(c);
}

namespace {

using namespace dynamo::core::interp;
using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

PyObject* viewLocal(const void* context, int slot) {
  return static_cast<const FrameView*>(context)->local(slot);
}

FrameValues valuesOf(const FrameView& view) {
  FrameValues v;
  v.nlocals = view.numLocals();
  v.context = &view;
  v.localAt = viewLocal;
  v.globals = view.globals();
  v.builtins = view.builtins();
  return v;
}

/// The cache entry's guard: a GuardSet over the intercepted frame, then its shape guards.
class GuardSetCheck : public GuardCheck {
 public:
  GuardSetCheck(GuardSet set, std::unique_ptr<ShapeGuards> shapes)
      : set_(std::move(set)), shapes_(std::move(shapes)) {}
  bool check(const FrameView& frame) override {
    FrameValues v = valuesOf(frame);
    return set_.check(v) && (!shapes_ || shapes_->check(v));
  }
  // The failures as data are kept for the compile that follows the miss (its EntryMiss).
  std::string failureReason(const FrameView& frame) override {
    FrameValues v = valuesOf(frame);
    lastFailures_ = set_.failures(v);
    if (lastFailures_.empty() && shapes_) {
      if (std::optional<GuardFailure> f = shapes_->failure(v)) lastFailures_.push_back(std::move(*f));
    }
    std::string out;
    for (const GuardFailure& f : lastFailures_) out += (out.empty() ? "" : "\n") + f.str();
    return out;
  }
  std::vector<GuardFailure> takeLastFailures() { return std::move(lastFailures_); }

 private:
  GuardSet set_;
  std::unique_ptr<ShapeGuards> shapes_;
  std::vector<GuardFailure> lastFailures_;  // of the last failureReason() call
};

// Why each cache entry of `state` missed, as data (what the hook's explainMiss() found).
std::vector<EntryMiss> missesOf(CodeState& state) {
  std::vector<EntryMiss> out;
  for (const std::shared_ptr<CacheEntry>& e : state.entries()) {
    auto* check = dynamic_cast<GuardSetCheck*>(e->guard.get());
    if (check == nullptr) continue;
    out.push_back(EntryMiss{e->id, check->takeLastFailures()});
  }
  return out;
}

BreakRecord recordOf(const GraphBreak& b) {
  BreakRecord r;
  r.kind = breakSlug(b.kind);
  r.detail = b.detail;
  r.explanation = breakExplanation(b.kind);
  r.hint = breakHint(b.kind);
  r.where = b.where;
  r.userStack = b.userStack;
  return r;
}

std::string codeName(PyCodeObject* code) { return PyUnicode_AsUTF8(code->co_qualname); }

// co_name of the user function a code object is, or continues ("<resume in <resume in f>>" -> f).
std::string userFunctionName(PyCodeObject* code) {
  std::string n = PyUnicode_AsUTF8(code->co_name);
  const std::string prefix = "<resume in ";
  while (n.compare(0, prefix.size(), prefix) == 0 && !n.empty() && n.back() == '>')
    n = n.substr(prefix.size(), n.size() - prefix.size() - 1);
  return n;
}

SourceLocation codeLocation(PyCodeObject* code) {
  SourceLocation loc;
  loc.file = PyUnicode_AsUTF8(code->co_filename);
  loc.line = code->co_firstlineno;
  return loc;
}

// Prints a warning through Python's warnings module (once per message, Python's default).
void warn(const std::string& text) {
  if (PyErr_WarnEx(PyExc_UserWarning, text.c_str(), 1) < 0) PyErr_Clear();
}

class Compiler : public FrameCompiler {
 public:
  explicit Compiler(CompilerOptions options) : opts_(std::move(options)), ownerId_(nextOwnerId()) {}
  uint64_t ownerId() const override { return ownerId_; }

  CompileResult compile(const FrameView& frame, CodeState& state) override {
    PyCodeObject* code = frame.code();
    CompileRecord rec;
    rec.function = codeName(code);
    rec.where = codeLocation(code);
    rec.attempt = static_cast<int>(state.stats().compiles);
    if (!state.lastMissReasons().empty()) {
      for (const std::string& r : state.lastMissReasons()) rec.reason += r + "\n";
      rec.misses = missesOf(state);
    }
    auto t0 = Clock::now();
    if (!opts_.onlyFunction.empty() && userFunctionName(code) != opts_.onlyFunction)
      return CompileResult::skipCode();
    // A forced code (the forward of a module passed to compile) is compiled even in a skipped
    // file, and so are the resume functions that continue it after a graph break.
    const ResumeInfo* resumed = resumeInfo(code);
    PyObject* root = resumed != nullptr ? resumed->rootCode.get() : reinterpret_cast<PyObject*>(code);
    bool forced = false;
    for (const PyObjectRef& c : opts_.forceCodes) forced = forced || c.get() == root;
    for (const std::string& prefix : opts_.skipFilePrefixes) {
      if (!forced && rec.where.file.compare(0, prefix.size(), prefix) == 0) return CompileResult::skipCode();
    }
    for (const std::string& prefix : opts_.noInlineFilePrefixes) {
      if (!forced && rec.where.file.compare(0, prefix.size(), prefix) == 0) return CompileResult::skipCode();
    }
    // The trace store's run opens before the first compile's backend can crash.
    if (const auto& sink = compileSink()) sink->compileStarting();
    rec.hasListings = wantsListings();
    if (static_cast<int>(state.entries().size()) >= opts_.cacheSizeLimit) {
      std::string last = state.lastMissReasons().empty() ? "" : state.lastMissReasons().front();
      warn("dynamo: function '" + rec.function + "' (" + rec.where.str() + ") hit cache_size_limit (" +
           std::to_string(opts_.cacheSizeLimit) + "); calls that match none of its compiled entries now run eagerly. " +
           "Last reason: " + last + ". To see every recompile reason, use DYNAMO_LOGS=recompiles or dynamo.profile_recompiles().");
      rec.status = CompileStatus::kCacheLimit;
      rec.reason = "cache_size_limit reached; last reason: " + last;
      notify(rec);
      state.skipFor(ownerId_);
      return CompileResult::runDefault();
    }
    try {
      CompileResult r = compileFrame(frame, code, rec);
      rec.totalMs = msSince(t0);
      notify(rec);
      return r;
    } catch (const UserError&) {
      PyErr_Clear();
      throw;  // fullgraph errors and user-facing backend errors propagate
    } catch (const PythonError&) {
      return fallback(rec, t0, pythonErrorText());
    } catch (const Error& e) {
      return fallback(rec, t0, e.what());
    } catch (const GraphBreak& b) {
      return fallback(rec, t0, "graph break outside the root frame: " + b.detail);
    } catch (const std::exception& e) {
      return fallback(rec, t0, std::string("internal error: ") + e.what());
    }
  }

 private:
  CompileResult fallback(CompileRecord& rec, Clock::time_point t0, const std::string& why) {
    PyErr_Clear();
    rec.status = CompileStatus::kFailed;
    rec.reason = why;
    rec.totalMs = msSince(t0);
    notify(rec);
    if (!opts_.suppressErrors) {
      throw UserError(UserErrorKind::kBackend, "compiling '" + rec.function + "' failed: " + why, rec.where, "",
                      "set dynamo.config.suppress_errors = True to run such functions eagerly instead");
    }
    warn("dynamo: could not compile '" + rec.function + "' (" + rec.where.str() + "); running it eagerly. Reason: " + why);
    return CompileResult::skipCode();
  }

  static std::string pythonErrorText() {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    std::string text = "Python error";
    if (ev != nullptr) {
      PyObject* s = PyObject_Str(ev);  // new ref
      if (s != nullptr) text = std::string(Py_TYPE(ev)->tp_name) + ": " + PyUnicode_AsUTF8(s);
      Py_XDECREF(s);
    }
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    PyErr_Clear();
    return text;
  }

  // Whether someone reads this compile's listings: the sink (a trace store is attached, or a
  // log prints them) or the listener. Building them costs a third of a compile (docs/performance.md).
  bool wantsListings() const {
    const std::shared_ptr<CompileSink>& sink = compileSink();
    if (sink && sink->wantsListings()) return true;
    return opts_.listener && (!opts_.listenerWantsListings || opts_.listenerWantsListings());
  }

  // The sink (the trace store) first, then the Python listeners; neither may disturb the compile.
  // The graph listings are built here, once for both, and only when someone reads them.
  void notify(CompileRecord& rec) {
    const std::shared_ptr<CompileSink>& sink = compileSink();
    if (!sink && !opts_.listener) return;
    if (rec.hasListings) {
      for (const Graph& g : rec.graphs) {
        rec.printedGraphs.push_back(printGraph(g));
        rec.serializedGraphs.push_back(serializeGraph(g));
      }
    }
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (sink) sink->compiled(rec);
    try {
      if (opts_.listener) opts_.listener(rec);
    } catch (...) {
      PyErr_Clear();
    }
    PyErr_Restore(et, ev, tb);
  }

  CompileResult compileFrame(const FrameView& frame, PyCodeObject* code, CompileRecord& rec) {
    auto tTrace = Clock::now();
    // Snapshot the slot values (the tracer reads them many times).
    std::vector<PyObject*> slots(static_cast<size_t>(frame.numLocals()));
    for (int i = 0; i < frame.numLocals(); ++i) slots[i] = frame.local(i);  // borrowed refs
    FrameValues fv;
    fv.locals = slots.data();
    fv.nlocals = static_cast<int>(slots.size());
    fv.globals = frame.globals();
    fv.builtins = frame.builtins();

    TraceOptions topts;
    topts.noInlinePrefixes = opts_.noInlineFilePrefixes;
    topts.dynamic = dynamicState(code, rec);
    for (int restart = 0;; ++restart) {
      DYNAMO_INTERNAL_ASSERT(restart < 64, "too many restarts");
      auto ctx = std::make_unique<CompileContext>(fv, code, topts);
      auto root = std::make_unique<Tracer>(*ctx, code, frame.globals(), frame.builtins());
      ValueRef returned;
      try {
        returned = runTrace(*ctx, *root);
      } catch (const std::exception&) {
        // An error of a trace with symbolic ints: trace again with every int constant.
        if (!topts.symbolicInts || ctx->symIntsMade == 0) throw;
        PyErr_Clear();
        topts.symbolicInts = false;
        continue;
      }
      if (!ctx->duckSplit.empty()) {
        // A duck-sized symbol was specialised: trace again with its dimensions apart, so that
        // a batch equal to a layer's width at the first call stays dynamic (dynamic.cpp).
        size_t before = topts.noDuck.size();
        topts.noDuck.insert(ctx->duckSplit.begin(), ctx->duckSplit.end());
        if (topts.noDuck.size() > before) continue;
      }
      const RootBreak* brk = root->rootBreak();
      if (brk && topts.symbolicInts && ctx->symIntsMade > 0) {
        // A break in a trace with symbolic ints: trace again with every int constant. Where that
        // trace breaks elsewhere (or not at all), the ints caused the break: keep the plain trace.
        TraceOptions plain = topts;
        plain.symbolicInts = false;
        auto ctx2 = std::make_unique<CompileContext>(fv, code, plain);
        auto root2 = std::make_unique<Tracer>(*ctx2, code, frame.globals(), frame.builtins());
        ValueRef returned2 = runTrace(*ctx2, *root2);
        const RootBreak* brk2 = root2->rootBreak();
        if (!brk2 || brk2->instruction != brk->instruction || brk2->info.kind != brk->info.kind ||
            brk2->needsRestart != brk->needsRestart) {
          topts = plain;
          root = std::move(root2);  // before ctx: the tracer refers to its context
          ctx = std::move(ctx2);
          returned = returned2;
          brk = brk2;
        }
      }
      if (brk && brk->needsRestart) {
        rec.breaks.push_back(recordOf(brk->info));
        if (brk->info.wholeFrame && brk->info.rootFrame) {  // an inlined call reads this frame
          if (opts_.fullgraph) raiseFullgraph(brk->info);
          return skip(rec, brk->info.detail + "; the function runs as Python");
        }
        GraphBreak forced = brk->info;
        forced.wholeFrame = false;  // the callee needs its frame; this frame can break at the call
        topts.forcedBreaks[brk->instruction] = forced;
        continue;
      }
      if (brk) {
        if (!topts.forcedBreaks.count(brk->instruction)) rec.breaks.push_back(recordOf(brk->info));
        if (opts_.fullgraph) raiseFullgraph(brk->info);
        if (brk->info.wholeFrame) {
          return skip(rec, brk->info.detail + "; the function runs as Python");
        }
        const bytecode::Bytecode& rootCode = root->bytecode();
        const bytecode::ExceptionHandler breakHandler = rootCode.instructions[brk->instruction].handler;
        if (bytecode::firstUserHandler(rootCode, breakHandler).active()) {
          return skip(rec, "graph break inside a try block (" + brk->info.detail + "); the function runs eagerly so its exception handlers stay in force");
        }
        if (root->insideLoop(brk->instruction)) {
          return skip(rec, "graph break inside a loop (" + brk->info.detail + "); the function runs eagerly and the functions it calls are compiled on their own");
        }
        if (breakHandler.active()) {  // only CPython's own cleanup handler: no resume under it
          return skip(rec, "graph break inside a block CPython covers with a cleanup handler (" + brk->info.detail + "); the function runs eagerly");
        }
        if (ctx->gradEnabled != initialGrad()) {
          return skip(rec, "graph break inside a `with torch.no_grad()/enable_grad()` block");
        }
        if (!ctx->autocastBlocks.empty()) {
          return skip(rec, "graph break inside a `with torch.autocast(...)` block (" + brk->info.detail + "); the function runs as Python");
        }
        if (ctx->inferenceBlocks > 0) {
          return skip(rec, "graph break inside a `with torch.inference_mode()` block (" + brk->info.detail + "); the function runs as Python");
        }
      } else if (!ctx->autocastBlocks.empty() || ctx->inferenceBlocks > 0 || ctx->gradEnabled != initialGrad()) {
        // Returned with a block still open (or grad mode switched): a generator suspended inside
        // `with torch.autocast()`, `with torch.inference_mode()` or `with torch.no_grad()`. Eager leaves it when the generator is closed (when it
        // is collected), which the graph cannot know; its enter node alone would leave the state
        // on after the call.
        return skip(rec, "the function returns with grad mode switched or with a `with torch.autocast(...)` or "
                         "`with torch.inference_mode()` block of a suspended generator open; the function runs as Python");
      }
      rec.captureMs = msSince(tTrace);
      ActiveCompile active(*ctx);
      return finish(frame, code, *ctx, *root, returned, brk, rec);
    }
  }

  static ValueRef runTrace(CompileContext& ctx, Tracer& root) {
    ActiveCompile active(ctx);
    return root.run();
  }

  static bool initialGrad() {
    PyObjectRef r = PyObjectRef::steal(checkPy(PyObject_CallNoArgs(torchApi().isGradEnabled)));
    return r.get() == Py_True;
  }

  CompileResult skip(CompileRecord& rec, const std::string& why) {
    rec.status = CompileStatus::kSkipped;
    rec.reason = why;
    return CompileResult::skipCode();
  }

  [[noreturn]] void raiseFullgraph(const GraphBreak& b) {
    std::string summary = std::string("graph break (") + breakSlug(b.kind) + ") with fullgraph=True: " + b.detail;
    throw UserError(UserErrorKind::kUnsupported, summary, b.where, breakExplanation(b.kind),
                    std::string(breakHint(b.kind)) + "; or pass fullgraph=False to allow graph breaks");
  }

  CompileResult finish(const FrameView& frame, PyCodeObject* code, CompileContext& ctx, Tracer& root,
                       const ValueRef& returned, const RootBreak* brk, CompileRecord& rec) {
    (void)frame;
    OutputPlan plan;
    try {
      plan = planOutputs(ctx, root, returned, brk);
    } catch (const GraphBreak& b) {
      return skip(rec, "cannot continue after the graph: " + b.detail);
    }
    // The pass pipeline between capture and the backend (passes.def).
    PassOptions passOptions = opts_.passOptions;
    passOptions.printGraphs = rec.hasListings;
    Graph captured = withSymShapes(ctx, ctx.graph.build());
    Graph graph = runPasses(captured, passOptions, &rec.passes);
    bool hasOps = !graph.body().empty();
    if (!hasOps && !brk && ctx.effects.empty()) {
      return skip(rec, "no tensor operations to capture");
    }
    auto tGuards = Clock::now();
    // A backend other than the eager runner fixes the graph's dtypes when it compiles (the AOT
    // layer traces under the autocast state of this call): the autocast state is guarded, so a
    // call under another state recompiles (the eager runner's ops autocast as they run).
    if (hasOps && opts_.backendName != "eager") guardAutocastEntry(ctx);
    GuardSet guards = ctx.guards.build();
    rec.guards = guards.guards();
    if (rec.hasListings) rec.guardText = guards.describe();
    std::unique_ptr<ShapeGuards> shapeGuards = makeShapeGuards(ctx);
    rec.dynamicShapes = dynamicText(ctx, shapeGuards.get(), rec.dynamicShapes);
    rec.guardMs = msSince(tGuards);

    auto tBackend = Clock::now();
    GraphCallSpec& spec = *plan.spec;
    spec.name = "graph of " + rec.function + " at " + rec.where.str();
    spec.hasGraph = hasOps || !graph.output()->outputValue().items().empty();
    if (ctx.switchesGradMode) spec.restoreGradMode = ctx.initialGradEnabled ? 1 : 0;
    spec.leavesContextBlocks = ctx.usesContextBlocks;
    if (spec.hasGraph) {
      BackendRequest request{graph, ctx.realInputs, rec.function, rec.where, opts_.suppressErrors};
      for (int id = 0; id < ctx.shapes.numSymbols() && !request.dynamic; ++id) request.dynamic = !ctx.shapes.pinned(id);
      for (const auto& [source, v] : ctx.symFloatInputs) request.dynamic = request.dynamic || !ctx.specialisedFloats.count(source.name());
      if (request.dynamic && !opts_.backendHandlesDynamic) {
        rec.dynamicShapes += "backend '" + opts_.backendName + "' specialises its graph on the input sizes: this entry "
                             "compiles the graph once per distinct input size when called (the function is not "
                             "recompiled)\n";
      }
      // A fatal signal from here on is "crashed in a backend" in a traced run's crash marker
      // (the sink names the compile's first call once the compile is recorded).
      if (const auto& sink = compileSink()) sink->backendStarting();
      std::optional<BackendKernelCollector> kernels;
      if (rec.hasListings) kernels.emplace(&rec.kernels);
      CapturedGraphScope capturedScope(&captured);
      spec.fn = opts_.backend->compile(request);
    }
    rec.backendMs = msSince(tBackend);
    rec.graphs.push_back(graph);

    const CompiledGraphFn* backendFn = spec.fn.get();  // owned by the compiled graph below
    PyObjectRef compiled = PyObjectRef::steal(checkPy(makeCompiledGraph(std::move(plan.spec))));
    PyObjectRef newCode = emitCode(ctx, root, code, plan, compiled.get(), brk);
    if (rec.hasListings)
      rec.bytecode = bytecode::print(bytecode::decode(reinterpret_cast<PyCodeObject*>(newCode.get())));
    rec.status = rec.breaks.empty() ? CompileStatus::kOk : CompileStatus::kGraphBreak;
    auto entry = std::make_shared<CacheEntry>(
        std::make_unique<GuardSetCheck>(std::move(guards), std::move(shapeGuards)), newCode.get());
    rec.entryId = entry->id;
    if (backendFn) backendFn->entryMade(entry->id);
    rec.entry = entry;
    entry->owner = ownerId_;
    return CompileResult::addEntry(std::move(entry));
  }

  // The dynamic-shape policy of `code` (null: every size static, with the reason in the record).
  std::shared_ptr<DynamicState> dynamicState(PyCodeObject* code, CompileRecord& rec) {
    if (opts_.dynamic == 0) return nullptr;
    if (!opts_.backendHandlesDynamic && !opts_.backendPerSize) {
      rec.dynamicShapes = "every size is static: backend '" + opts_.backendName +
                          "' specialises its graph on the example sizes (one compile per size)\n";
      return nullptr;
    }
    DynamicMode mode = opts_.dynamic == 1 ? DynamicMode::kAll : DynamicMode::kAutomatic;
    return dynamic_.forCode(code, mode, opts_.automaticDynamic);
  }

  static std::string dynamicText(const CompileContext& ctx, const ShapeGuards* shapes, std::string text) {
    for (const std::string& n : ctx.dynamicNotes) text += n + "\n";
    if (shapes) text += shapes->describe();
    return text;
  }

  static uint64_t nextOwnerId() {
    static uint64_t next = 0;  // GIL held
    return ++next;
  }

  CompilerOptions opts_;
  uint64_t ownerId_;
  DynamicRegistry dynamic_;
};

}  // namespace

int registerCompilerTypes(PyObject* module) { return registerCompiledGraphType(module); }

namespace {
PyTypeObject* theCompiledFunctionType = nullptr;  // borrowed: a static type of the binding layer
}  // namespace

void setCompiledFunctionType(PyTypeObject* type) { theCompiledFunctionType = type; }
PyTypeObject* compiledFunctionType() { return theCompiledFunctionType; }

std::shared_ptr<FrameCompiler> makeFrameCompiler(CompilerOptions options) {
  return std::make_shared<Compiler>(std::move(options));
}

}  // namespace dynamo::core
