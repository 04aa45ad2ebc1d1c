// Rendering of the project's two error kinds (see error.h).
#include "dynamo/common/error.h"

namespace dynamo {

std::string SourceLocation::str() const {
  if (file.empty()) return {};
  if (line <= 0) return file;
  return file + ":" + std::to_string(line);
}

std::string renderUserError(const std::string& summary, const SourceLocation& where,
                            const std::string& explanation, const std::string& hint) {
  std::string out = "error: " + summary;
  if (where.known()) {
    out += "\n  --> " + where.str();
    if (!where.sourceLine.empty()) out += "\n   |  " + where.sourceLine;
  }
  if (!explanation.empty()) out += "\n  = why: " + explanation;
  if (!hint.empty()) out += "\n  = hint: " + hint;
  return out;
}

UserError::UserError(UserErrorKind kind, std::string summary, SourceLocation where,
                     std::string explanation, std::string hint)
    : Error(renderUserError(summary, where, explanation, hint)),
      kind_(kind),
      summary_(std::move(summary)),
      where_(std::move(where)),
      explanation_(std::move(explanation)),
      hint_(std::move(hint)) {}

static std::string renderInternal(const char* file, int line, const std::string& condition,
                                  const std::string& message) {
  std::string out = "internal error at " + std::string(file) + ":" + std::to_string(line);
  if (!condition.empty()) out += ": check '" + condition + "' failed";
  if (!message.empty()) out += ": " + message;
  out += "\nThis is a bug in Dynamo, not in your code. Please report it with this message.";
  return out;
}

InternalError::InternalError(const char* file, int line, std::string condition,
                             std::string message)
    : Error(renderInternal(file, line, condition, message)), file_(file), line_(line) {}

namespace detail {
void internalFail(const char* file, int line, const char* condition, std::string message) {
  throw InternalError(file, line, condition, std::move(message));
}
}  // namespace detail

}  // namespace dynamo
