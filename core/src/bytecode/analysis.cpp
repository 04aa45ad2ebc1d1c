// Stack-depth analysis and the bytecode verifier.
//
// The analysis is a work-list fixed point over three kinds of edges:
//   fall-through  i -> i+1          depth + stackEffect(op, arg, jump=false)
//   jump          i -> target       depth + stackEffect(op, arg, jump=true)
//   exception     i -> handler      handler.depth + lasti + 1 (CPython pops to `depth`, pushes
//                                   the offset when lasti is set, then the exception)
// Generator-like code (CO_GENERATOR / CO_COROUTINE / CO_ASYNC_GENERATOR) starts at depth 1, as
// in CPython's own stackdepth(): resuming pushes the sent value that the POP_TOP after
// RETURN_GENERATOR removes.
// Each reachable instruction gets exactly one depth; a second, different depth arriving at a
// merge point is an error, as is a negative depth. co_stacksize is the largest depth seen.
// Unreachable instructions (e.g. the part of an original body before a resume function's jump
// target) get -1 and are not checked.
#include <opcode.h>

#include <string>
#include <vector>

#include "dynamo/common/error.h"
#include "dynamo/core/bytecode.h"

namespace dynamo::core::bytecode {
namespace {

// "#12 POP_TOP 0 (line 3, offset 24)": names an instruction in verifier messages.
std::string describe(const Bytecode& bc, int i) {
  if (i < 0 || static_cast<size_t>(i) >= bc.instructions.size()) {
    return "#" + std::to_string(i) + " (out of range)";
  }
  const Instruction& ins = bc.instructions[i];
  std::string out = "#" + std::to_string(i) + " " + ins.name() + " " + std::to_string(ins.arg);
  out += " (line " + (ins.pos.line >= 0 ? std::to_string(ins.pos.line) : std::string("-"));
  if (ins.offset >= 0) out += ", offset " + std::to_string(ins.offset);
  return out + ")";
}

[[noreturn]] void fail(const Bytecode& bc, int i, const std::string& what) {
  throw InternalError(__FILE__, __LINE__, "",
                      "bytecode verifier: at " + describe(bc, i) + ": " + what);
}

struct DepthAnalysis {
  std::vector<int> depths;
  int maxDepth = 0;
};

DepthAnalysis analyze(const Bytecode& bc, int coFlags) {
  const auto& instrs = bc.instructions;
  int n = static_cast<int>(instrs.size());
  DepthAnalysis a;
  a.depths.assign(n, -1);
  if (n == 0) return a;
  std::vector<int> work;
  // Records depth d arriving at j along an edge from instruction `from` (-1: entry).
  auto reach = [&](int from, int j, int d, const char* edge) {
    if (j < 0 || j >= n) fail(bc, from, std::string(edge) + " target #" + std::to_string(j) +
                                            " is out of range (" + std::to_string(n) +
                                            " instructions)");
    if (d < 0) {
      fail(bc, from, "stack underflow: depth " + std::to_string(d) + " after the " + edge +
                         " edge to #" + std::to_string(j));
    }
    if (d > a.maxDepth) a.maxDepth = d;
    if (a.depths[j] < 0) {
      a.depths[j] = d;
      work.push_back(j);
    } else if (a.depths[j] != d) {
      fail(bc, j, "stack depth mismatch at a merge point: " + std::to_string(a.depths[j]) +
                      " on one path, " + std::to_string(d) + " on the " + edge + " edge from " +
                      describe(bc, from));
    }
  };
  reach(-1, 0, entryStackDepth(coFlags), "entry");
  while (!work.empty()) {
    int i = work.back();
    work.pop_back();
    const Instruction& ins = instrs[i];
    const OpcodeInfo* info = opcodeInfo(ins.opcode);
    if (!info) fail(bc, i, "unknown opcode " + std::to_string(ins.opcode));
    int d = a.depths[i];
    if (ins.handler.active()) {
      if (d < ins.handler.depth) {
        fail(bc, i, "stack depth " + std::to_string(d) + " is below the exception handler depth " +
                        std::to_string(ins.handler.depth));
      }
      reach(i, ins.handler.target, ins.handler.depth + (ins.handler.lasti ? 1 : 0) + 1,
            "exception");
    }
    if (info->has(kJump)) reach(i, ins.target, d + stackEffect(ins.opcode, ins.arg, true), "jump");
    if (!info->has(kNoFallthrough)) {
      if (i + 1 >= n) fail(bc, i, "control falls off the end of the code");
      reach(i, i + 1, d + stackEffect(ins.opcode, ins.arg, false), "fall-through");
    }
  }
  return a;
}

// Checks one instruction on its own: opcode, arg, jump target, handler, indices.
void checkInstruction(const Bytecode& bc, int i, const CodeOptions* opts, int nlocalsplus) {
  const Instruction& ins = bc.instructions[i];
  int n = static_cast<int>(bc.instructions.size());
  const OpcodeInfo* info = opcodeInfo(ins.opcode);
  if (!info) fail(bc, i, "unknown opcode " + std::to_string(ins.opcode));
  if (ins.opcode == CACHE || ins.opcode == EXTENDED_ARG) {
    fail(bc, i, "CACHE and EXTENDED_ARG are emitted by the assembler, not listed");
  }
  if (ins.arg < 0) fail(bc, i, "negative arg");
  if (!hasArgument(ins.opcode) && ins.arg != 0) fail(bc, i, "opcode takes no arg");
  if (info->has(kJump)) {
    if (ins.target < 0 || ins.target >= n) {
      fail(bc, i, "jump target #" + std::to_string(ins.target) + " is out of range (" +
                      std::to_string(n) + " instructions)");
    }
    bool backward = ins.target <= i;
    if (jumpVariant(ins.opcode, backward) < 0) {
      fail(bc, i, std::string("cannot jump ") + (backward ? "backward" : "forward") + " to #" +
                      std::to_string(ins.target) + " with this opcode on this Python version");
    }
  } else if (ins.target != -1) {
    fail(bc, i, "a target is set on an instruction that does not jump");
  }
  if (ins.handler.active() && (ins.handler.target >= n || ins.handler.depth < 0)) {
    fail(bc, i, "exception handler #" + std::to_string(ins.handler.target) + " depth " +
                    std::to_string(ins.handler.depth) + " is invalid");
  }
  if (!opts) return;
  auto inRange = [&](int index, size_t size, const char* what) {
    if (index < 0 || static_cast<size_t>(index) >= size) {
      fail(bc, i, std::string(what) + " index " + std::to_string(index) + " is out of range (" +
                      std::to_string(size) + " entries)");
    }
  };
  if (info->has(kHasConst)) inRange(ins.arg, opts->consts.size(), "co_consts");
  if (info->has(kHasName)) inRange(nameIndex(ins.opcode, ins.arg), opts->names.size(), "co_names");
  if (info->has(kHasLocal)) inRange(ins.arg, opts->varnames.size(), "local");
  if (info->has(kHasFree)) inRange(ins.arg, static_cast<size_t>(nlocalsplus), "localsplus");
}

}  // namespace

int entryStackDepth(int coFlags) {
  return (coFlags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) ? 1 : 0;
}

std::vector<int> stackDepths(const Bytecode& bc, int coFlags) {
  return analyze(bc, coFlags).depths;
}

int computeStackSize(const Bytecode& bc, int coFlags) { return analyze(bc, coFlags).maxDepth; }

std::vector<std::vector<bool>> liveLocals(const Bytecode& bc, int nlocals) {
  const auto& instrs = bc.instructions;
  const int n = static_cast<int>(instrs.size());
  std::vector<std::vector<bool>> live(n, std::vector<bool>(static_cast<size_t>(nlocals), false));
  auto local = [&](const Instruction& ins) {
    return opcodeInfo(ins.opcode) && opcodeInfo(ins.opcode)->has(kHasLocal) && ins.arg >= 0 && ins.arg < nlocals;
  };
  // Iterate to a fixed point; walking backwards converges in a few rounds for reducible code.
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = n - 1; i >= 0; --i) {
      const Instruction& ins = instrs[i];
      std::vector<bool> out(static_cast<size_t>(nlocals), false);
      auto merge = [&](int j) {
        if (j < 0 || j >= n) return;
        for (int s = 0; s < nlocals; ++s)
          if (live[j][s]) out[s] = true;
      };
      const OpcodeInfo* info = opcodeInfo(ins.opcode);
      if (!(info && info->has(kNoFallthrough))) merge(i + 1);
      if (ins.isJump()) merge(ins.target);
      if (ins.handler.active()) merge(ins.handler.target);
      if (local(ins)) {
        if (ins.opcode == STORE_FAST) {
          out[ins.arg] = false;
        } else {
          out[ins.arg] = true;  // loads, deletes (of an unbound local: an error) and checks read it
        }
      }
      if (out != live[i]) {
        live[i] = std::move(out);
        changed = true;
      }
    }
  }
  return live;
}

void verify(const Bytecode& bc, const CodeOptions* opts) {
  if (bc.instructions.empty()) throw InternalError(__FILE__, __LINE__, "", "bytecode verifier: "
                                                   "no instructions");
  int nlocalsplus = opts ? static_cast<int>(opts->localsPlusNames().size()) : 0;
  for (int i = 0; i < static_cast<int>(bc.instructions.size()); ++i) {
    checkInstruction(bc, i, opts, nlocalsplus);
  }
  analyze(bc, opts ? opts->flags : 0);
}

}  // namespace dynamo::core::bytecode
