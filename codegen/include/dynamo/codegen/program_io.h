// A lowered Program as bytes and back: what the fused backend's program cache stores on disk
// (backends/src/fused_program_cache.cpp), so that a warm compile skips the lowering and fusion.
//
//   bytes = "DYNP" u32 version, then every field of the Program in declaration order:
//           integers little-endian fixed width, strings and vectors length-prefixed,
//           doubles as their bit patterns (exact), expressions as a table in first-use order
//           (a shared subexpression is written once and referenced by index, so the read
//           program shares it as the lowered one did)
//
// readProgram(writeProgram(p)) prints (printProgram) and emits exactly as p. No torch, no Python.
#pragma once

#include <stdexcept>
#include <string>

#include "dynamo/codegen/loop_ir.h"

namespace dynamo::codegen {

/// Version of the byte format written by writeProgram.
constexpr unsigned kProgramFormatVersion = 5;  // 2: Python numbers read at call time; 3: Buffer::storage; 4: conv post-ops;
                                               // 5: Step::reads (pooling externs read arena slots)

/// Bytes that readProgram cannot read as a Program (truncated, another version, an enum or
/// index out of range): the message says what and where.
class ProgramFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The program as bytes (the format above).
std::string writeProgram(const Program& p);

/// The program of bytes written by writeProgram; throws ProgramFormatError otherwise.
Program readProgram(const std::string& bytes);

}  // namespace dynamo::codegen
