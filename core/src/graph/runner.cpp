// GraphRunner (graph_runner.h): plans a graph once, then runs it with vectorcall.
//
// Plan, made at construction:
//   slots    0..I-1 are the inputs (borrowed from the caller by run(), never freed; owned by
//            runOwned(), freed after their last use, unused ones before the first step);
//            I..I+B-1 the results of the B body nodes (owned; freed after their last use).
//   steps    one per body node: the callable (or method name), where each argument comes from
//            (a constant made once, a slot, or a container built per call from slots), the
//            kwnames tuple, and the slots to free after the call.
// run() fills a stack buffer of slots, walks the steps, builds the output structure and frees
// what is left. Nothing is allocated on the heap per call for graphs up to kStackSlots slots.
#include <algorithm>
#include <array>
#include <memory>
#include <unordered_map>

#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_python.h"
#include "dynamo/core/graph_runner.h"
#include "py_errors.h"

namespace dynamo::core {
namespace {

constexpr size_t kStackSlots = 64;

// A buffer of T on the stack, or on the heap when larger than N.
template <typename T, size_t N>
class SmallBuffer {
 public:
  explicit SmallBuffer(size_t n) {
    if (n > N) heap_.reset(new T[n]);
    data_ = heap_ ? heap_.get() : stack_.data();
    std::fill(data_, data_ + n, T{});
  }
  T* data() { return data_; }
  T& operator[](size_t i) { return data_[i]; }

 private:
  std::array<T, N> stack_;
  std::unique_ptr<T[]> heap_;
  T* data_;
};

// Where one argument of a step comes from.
struct ArgSource {
  enum Kind { kConstant, kSlot, kBuilt } kind = kConstant;
  PyObject* constant = nullptr;  ///< kConstant: borrowed from Plan::constants
  int slot = -1;                 ///< kSlot
  const Arg* arg = nullptr;      ///< kBuilt: borrowed from the graph's node
};

struct Step {
  const Node* node = nullptr;
  bool isMethod = false;
  PyObject* callable = nullptr;  ///< borrowed: the target, or the method name (in constants)
  std::vector<ArgSource> args;   ///< positional, then keyword values
  size_t nargs = 0;              ///< positional count (for methods, including self)
  PyObject* kwnames = nullptr;   ///< borrowed from Plan::constants; NULL without kwargs
  int resultSlot = -1;
  std::vector<int> freeAfter;    ///< slots whose last use is this step
  std::vector<int> freeInputsAfter;  ///< input slots whose last use is this step (runOwned)
  size_t builtCount = 0;         ///< how many args are kBuilt
};

// Adds "While running node ..." and the user's location to the pending exception as a PEP 678
// note (shown by tracebacks), keeping its type and its message exactly as eager's, and sets its
// `graph_node` attribute to the node's name.
void annotateError(const Node& node) {
  PyObject* exc = takePythonException();  // new ref, restored below
  if (exc == nullptr) return;
  std::string context = "While running node '" + node.name() + "' of the captured graph: " +
                        printNode(node);
  const SourceLocation& loc = node.meta().location;
  if (loc.known()) {
    context += "\n  --> " + loc.str();
    if (!loc.sourceLine.empty()) context += "\n   |  " + loc.sourceLine;
  }
  PyObjectRef r = PyObjectRef::steal(PyObject_CallMethod(exc, "add_note", "s", context.c_str()));
  PyErr_Clear();
  PyObjectRef name = PyObjectRef::steal(PyUnicode_FromString(node.name().c_str()));  // new ref
  if (name && PyObject_SetAttrString(exc, "graph_node", name.get()) < 0) PyErr_Clear();
  PyErr_Clear();
  restorePythonException(exc);  // steals exc
}

}  // namespace

struct GraphRunner::Plan {
  size_t inputCount = 0;
  size_t slotCount = 0;
  size_t maxArgs = 0;
  size_t maxBuilt = 0;
  std::vector<Step> steps;
  ArgSource output;
  std::vector<PyObjectRef> constants;  ///< owns every constant, method name and kwnames tuple
  std::unordered_map<const Node*, int> slotOf;
  std::vector<int> lastUse;            ///< per slot; -1 for inputs
  std::vector<int> inputLastUse;       ///< per input slot; -1 when unused
  std::vector<int> unusedInputs;       ///< runOwned frees them before the first step

  ArgSource sourceOf(const Arg& arg) {
    ArgSource s;
    if (arg.isNode()) {
      s.kind = ArgSource::kSlot;
      s.slot = slotOf.at(arg.asNode().get());
    } else if (arg.containsNode()) {
      s.kind = ArgSource::kBuilt;
      s.arg = &arg;
    } else {
      constants.push_back(constantToPython(arg));
      s.constant = constants.back().get();
    }
    return s;
  }

  void noteUses(const Arg& arg, int step) {
    arg.forEachNode([&](const NodeRef& n) {
      int slot = slotOf.at(n.get());
      if (static_cast<size_t>(slot) >= inputCount) {
        lastUse[slot] = std::max(lastUse[slot], step);
      } else {
        inputLastUse[slot] = std::max(inputLastUse[slot], step);
      }
    });
  }

  Step planStep(const Node& n, int index) {
    Step step;
    step.node = &n;
    step.isMethod = n.op() == NodeOp::kCallMethod;
    if (step.isMethod) {
      constants.push_back(PyObjectRef::steal(checkPy(PyUnicode_InternFromString(n.method().c_str()))));
      step.callable = constants.back().get();
    } else {
      DYNAMO_USER_CHECK(n.target().hasCallable(), UserErrorKind::kInvalidArgument, "node '",
                        n.name(), "' calls '", n.target().qualifiedName(),
                        "', known by name only (a graph read back from JSON): resolve the "
                        "graph's targets first (resolveTargets, Graph.resolve())");
      step.callable = n.target().callable();  // borrowed: the graph owns it
    }
    for (const Arg& a : n.args()) {
      step.args.push_back(sourceOf(a));
      noteUses(a, index);
    }
    step.nargs = n.args().size();
    if (!n.kwargs().empty()) {
      PyObjectRef names = PyObjectRef::steal(checkPy(PyTuple_New(
          static_cast<Py_ssize_t>(n.kwargs().size()))));
      for (size_t i = 0; i < n.kwargs().size(); ++i) {
        const auto& [key, value] = n.kwargs()[i];
        PyTuple_SET_ITEM(names.get(), static_cast<Py_ssize_t>(i),
                         checkPy(PyUnicode_InternFromString(key.c_str())));  // steals new ref
        step.args.push_back(sourceOf(value));
        noteUses(value, index);
      }
      constants.push_back(names);
      step.kwnames = names.get();
    }
    for (const ArgSource& s : step.args) step.builtCount += s.kind == ArgSource::kBuilt;
    step.resultSlot = slotOf.at(&n);
    return step;
  }
};

GraphRunner::GraphRunner(Graph graph) : graph_(std::move(graph)), plan_(std::make_unique<Plan>()) {
  Plan& p = *plan_;
  p.inputCount = graph_.inputs().size();
  p.slotCount = p.inputCount + graph_.body().size();
  p.lastUse.assign(p.slotCount, -1);
  p.inputLastUse.assign(p.inputCount, -1);
  int slot = 0;
  for (const NodeRef& n : graph_.inputs()) p.slotOf[n.get()] = slot++;
  for (const NodeRef& n : graph_.body()) p.slotOf[n.get()] = slot++;
  for (size_t i = 0; i < graph_.body().size(); ++i) {
    const Node& n = *graph_.body()[i];
    p.lastUse[p.slotOf[&n]] = static_cast<int>(i);  // unused results die right away
    p.steps.push_back(p.planStep(n, static_cast<int>(i)));
    p.maxArgs = std::max(p.maxArgs, p.steps.back().args.size());
    p.maxBuilt = std::max(p.maxBuilt, p.steps.back().builtCount);
  }
  const Arg& out = graph_.output()->outputValue();
  int end = static_cast<int>(graph_.body().size());
  p.output = p.sourceOf(out);
  p.noteUses(out, end);
  for (size_t s = p.inputCount; s < p.slotCount; ++s) {
    if (p.lastUse[s] < end) p.steps[static_cast<size_t>(p.lastUse[s])].freeAfter.push_back(int(s));
  }
  for (size_t s = 0; s < p.inputCount; ++s) {
    int use = p.inputLastUse[s];
    if (use < 0) {
      p.unusedInputs.push_back(int(s));
    } else if (use < end) {
      p.steps[static_cast<size_t>(use)].freeInputsAfter.push_back(int(s));
    }
  }
}

GraphRunner::~GraphRunner() = default;

size_t GraphRunner::inputCount() const { return plan_->inputCount; }

std::vector<int> GraphRunner::lastUses() const { return plan_->lastUse; }

std::vector<int> GraphRunner::inputLastUses() const { return plan_->inputLastUse; }

PyObject* GraphRunner::run(PyObject* const* inputs, size_t count, size_t* failedAt) const {
  return execute(inputs, count, /*owned=*/false, failedAt);
}

PyObject* GraphRunner::runOwned(PyObject* const* inputs, size_t count, size_t* failedAt) const {
  return execute(inputs, count, /*owned=*/true, failedAt);
}

PyObject* GraphRunner::execute(PyObject* const* inputs, size_t count, bool owned,
                               size_t* failedAt) const {
  const Plan& p = *plan_;
  if (count != p.inputCount) {
    if (owned) {
      for (size_t i = 0; i < count; ++i) Py_XDECREF(inputs[i]);
    }
    PyErr_Format(PyExc_TypeError, "the graph takes %zu inputs but %zu were given",
                 p.inputCount, count);
    return nullptr;
  }
  SmallBuffer<PyObject*, kStackSlots> slots(p.slotCount);
  std::copy(inputs, inputs + count, slots.data());  // borrowed refs, or owned ones (runOwned)
  const size_t firstOwned = owned ? 0 : p.inputCount;
  SmallBuffer<PyObject*, 16> argv(p.maxArgs + 1);   // argv[0] is scratch for the callee
  SmallBuffer<PyObject*, 8> built(p.maxBuilt);      // new refs, released after each call
  NodeValueFn valueOf = [&](const NodeRef& n) { return slots[size_t(p.slotOf.at(n.get()))]; };
  auto releaseSlots = [&] {
    for (size_t s = firstOwned; s < p.slotCount; ++s) Py_CLEAR(slots[s]);
  };
  if (owned) {
    for (int s : p.unusedInputs) Py_CLEAR(slots[size_t(s)]);
  }

  for (size_t stepIndex = 0; stepIndex < p.steps.size(); ++stepIndex) {
    const Step& step = p.steps[stepIndex];
    size_t nbuilt = 0;
    for (size_t j = 0; j < step.args.size(); ++j) {
      const ArgSource& a = step.args[j];
      if (a.kind == ArgSource::kSlot) {
        argv[j + 1] = slots[size_t(a.slot)];  // borrowed ref
      } else if (a.kind == ArgSource::kConstant) {
        argv[j + 1] = a.constant;  // borrowed ref
      } else {
        try {
          built[nbuilt] = argToPython(*a.arg, valueOf).release();  // new ref
        } catch (const PythonError&) {
          for (size_t k = 0; k < nbuilt; ++k) Py_DECREF(built[k]);
          releaseSlots();
          return nullptr;
        }
        argv[j + 1] = built[nbuilt++];
      }
    }
    size_t nargsf = step.nargs | PY_VECTORCALL_ARGUMENTS_OFFSET;
    PyObject* result = step.isMethod  // new ref
                           ? PyObject_VectorcallMethod(step.callable, argv.data() + 1, nargsf,
                                                       step.kwnames)
                           : PyObject_Vectorcall(step.callable, argv.data() + 1, nargsf,
                                                 step.kwnames);
    for (size_t k = 0; k < nbuilt; ++k) Py_DECREF(built[k]);
    if (result == nullptr) {
      annotateError(*step.node);
      releaseSlots();
      if (failedAt != nullptr) *failedAt = stepIndex;
      return nullptr;
    }
    slots[size_t(step.resultSlot)] = result;  // owned by the slot
    for (int s : step.freeAfter) Py_CLEAR(slots[size_t(s)]);
    if (owned) {
      for (int s : step.freeInputsAfter) Py_CLEAR(slots[size_t(s)]);
    }
  }

  PyObject* out = nullptr;  // new ref
  if (p.output.kind == ArgSource::kSlot) {
    out = slots[size_t(p.output.slot)];
    Py_INCREF(out);
  } else if (p.output.kind == ArgSource::kConstant) {
    out = p.output.constant;
    Py_INCREF(out);
  } else {
    try {
      out = argToPython(*p.output.arg, valueOf).release();
    } catch (const PythonError&) {
      out = nullptr;
    }
  }
  releaseSlots();
  return out;
}

}  // namespace dynamo::core
