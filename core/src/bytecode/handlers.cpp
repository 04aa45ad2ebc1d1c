// Which exception handlers are the user's: the walk out through the handlers CPython adds only to
// clean up and re-raise (bytecode.h, firstUserHandler). The tracer (does graph code here run
// under a try?) and the compiler (is this graph break inside a try block?) share it.
#include <opcode.h>

#include <vector>

#include "dynamo/core/bytecode.h"

namespace dynamo::core::bytecode {
namespace {

// The exception-state cleanup of an `except` body or a `with` exit: COPY 3; POP_EXCEPT; RERAISE.
bool isExceptionStateCleanup(const std::vector<Instruction>& ins, int t) {
  const int n = static_cast<int>(ins.size());
  return ins[t].opcode == COPY && ins[t].arg == 3 && t + 2 < n &&
         ins[t + 1].opcode == POP_EXCEPT && ins[t + 2].opcode == RERAISE;
}

// Python 3.12 inlines comprehensions (PEP 709): the loop body is covered by a handler that only
// puts back the locals the comprehension shadowed (SWAP/POP_TOP/STORE_FAST) and re-raises.
bool isLocalRestoreReraise(const std::vector<Instruction>& ins, int t) {
  const int n = static_cast<int>(ins.size());
  bool restores = false;
  for (int i = t; i < n; ++i) {
    const int op = ins[i].opcode;
    if (op == RERAISE) return restores && ins[i].arg == 0;
    if (op == STORE_FAST) restores = true;
    else if (op != SWAP && op != POP_TOP) return false;
  }
  return false;
}

// Python 3.12 covers a generator's whole body with a handler that turns a StopIteration escaping
// it into RuntimeError (CALL_INTRINSIC_1 INTRINSIC_STOPITERATION_ERROR; RERAISE).
bool isStopIterationGuard(const std::vector<Instruction>& ins, int t) {
#ifdef CALL_INTRINSIC_1
  constexpr int kStopIterationError = 3;
  return t + 1 < static_cast<int>(ins.size()) && ins[t].opcode == CALL_INTRINSIC_1 &&
         ins[t].arg == kStopIterationError && ins[t + 1].opcode == RERAISE;
#else
  (void)ins;
  (void)t;
  return false;
#endif
}

}  // namespace

ExceptionHandler firstUserHandler(const Bytecode& bc, ExceptionHandler h) {
  const std::vector<Instruction>& ins = bc.instructions;
  const int n = static_cast<int>(ins.size());
  // Handlers nest outward, so the walk ends; the bound only guards against a malformed table.
  for (int hops = 0; h.active() && hops < 64; ++hops) {
    const int t = h.target;
    if (t >= n) return h;
    if (!isExceptionStateCleanup(ins, t) && !isLocalRestoreReraise(ins, t) &&
        !isStopIterationGuard(ins, t))
      return h;
    h = ins[t].handler;
  }
  return h;
}

bool isWithExitHandler(const Bytecode& bc, ExceptionHandler h) {
  const std::vector<Instruction>& ins = bc.instructions;
  const int t = h.target;
  return t >= 0 && t + 1 < static_cast<int>(ins.size()) && ins[t].opcode == PUSH_EXC_INFO &&
         ins[t + 1].opcode == WITH_EXCEPT_START;
}

}  // namespace dynamo::core::bytecode
