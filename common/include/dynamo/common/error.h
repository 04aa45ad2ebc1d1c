// The one error model of the project.
//
// Two kinds of error, kept apart (house style, rule 5):
//   - UserError: the user's code or input is at fault. It names the user's file and line where
//     there is one, the source line, an explanation and a hint on how to fix it.
//   - InternalError: Dynamo is at fault. It names our file and line and says it is a bug.
// Messages are built only when a check fails: the DYNAMO_* macros evaluate their message
// arguments on the failure path alone.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dynamo {

/// A place in the user's Python source.
struct SourceLocation {
  std::string file;        ///< the user's file, as Python names it (co_filename)
  int line = 0;            ///< 1-based line number; 0 when unknown
  std::string sourceLine;  ///< the text of that line, stripped; empty when unknown

  bool known() const { return !file.empty(); }
  /// "file.py:12", or "" when unknown.
  std::string str() const;
};

/// Which broad category a user error belongs to; mapped to Python exception types.
enum class UserErrorKind {
  kInvalidArgument,  ///< bad argument to a Dynamo API (maps to TypeError/ValueError in Python)
  kUnsupported,      ///< the user's code uses something Dynamo cannot capture (fullgraph)
  kTraceStore,       ///< the trace store file cannot be used
  kBackend,          ///< a backend failed on the user's graph
  kConfig,           ///< bad configuration (environment variable, option)
};

/// Base of every Dynamo exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The user's code or input is at fault. what() is the fully rendered message.
class UserError : public Error {
 public:
  /// summary: one line saying what is wrong; explanation: why; hint: how to fix it.
  UserError(UserErrorKind kind, std::string summary, SourceLocation where = {},
            std::string explanation = {}, std::string hint = {});

  UserErrorKind kind() const { return kind_; }
  const std::string& summary() const { return summary_; }
  const SourceLocation& where() const { return where_; }
  const std::string& explanation() const { return explanation_; }
  const std::string& hint() const { return hint_; }

 private:
  UserErrorKind kind_;
  std::string summary_;
  SourceLocation where_;
  std::string explanation_;
  std::string hint_;
};

/// Dynamo itself is at fault: a broken invariant. what() names our file and line.
class InternalError : public Error {
 public:
  InternalError(const char* file, int line, std::string condition, std::string message);

  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  const char* file_;
  int line_;
};

/// Renders a user error the way the CLI and the Python exceptions show it:
///
///   error: <summary>
///     --> model.py:12
///      |  if x.sum() < 0:
///     = why: <explanation>
///     = hint: <hint>
std::string renderUserError(const std::string& summary, const SourceLocation& where,
                            const std::string& explanation, const std::string& hint);

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}
[[noreturn]] void internalFail(const char* file, int line, const char* condition,
                               std::string message);
}  // namespace detail

}  // namespace dynamo

/// Checks an invariant of Dynamo's own code; on failure throws InternalError naming this file and
/// line. The message arguments are streamed together, and only evaluated on failure.
#define DYNAMO_INTERNAL_ASSERT(cond, ...)                                                 \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      ::dynamo::detail::internalFail(__FILE__, __LINE__, #cond,                           \
                                     ::dynamo::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                     \
  } while (0)

/// Throws a UserError of `kind` unless cond holds. Arguments after kind are streamed into the
/// summary line, evaluated only on failure. Use the UserError constructor directly to add a
/// location, explanation and hint.
#define DYNAMO_USER_CHECK(cond, kind, ...)                                                \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      throw ::dynamo::UserError((kind), ::dynamo::detail::concat(__VA_ARGS__));           \
    }                                                                                     \
  } while (0)
