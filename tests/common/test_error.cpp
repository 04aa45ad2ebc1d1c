// Unit tests of the error model: rendering and the lazy-message macros.
#include "dynamo/common/error.h"
#include "dynamo_catch.h"

using dynamo::InternalError;
using dynamo::SourceLocation;
using dynamo::UserError;
using dynamo::UserErrorKind;

TEST_CASE("a user error names the user's file, line, source, explanation and hint") {
  UserError e(UserErrorKind::kUnsupported, "data-dependent branch",
              SourceLocation{"model.py", 12, "if x.sum() < 0:"}, "the branch depends on a tensor value",
              "use torch.where");
  std::string expected =
      "error: data-dependent branch\n"
      "  --> model.py:12\n"
      "   |  if x.sum() < 0:\n"
      "  = why: the branch depends on a tensor value\n"
      "  = hint: use torch.where";
  CHECK(std::string(e.what()) == expected);
  CHECK(e.kind() == UserErrorKind::kUnsupported);
  CHECK(e.where().str() == "model.py:12");
}

TEST_CASE("a user error without a location renders the summary alone") {
  UserError e(UserErrorKind::kInvalidArgument, "bad");
  CHECK(std::string(e.what()) == "error: bad");
}

TEST_CASE("an internal error names our file and line and says it is our bug") {
  try {
    DYNAMO_INTERNAL_ASSERT(1 + 1 == 3, "value was ", 42);
    FAIL("no exception");
  } catch (const InternalError& e) {
    std::string msg = e.what();
    CHECK(msg.find("test_error.cpp:") != std::string::npos);
    CHECK(msg.find("check '1 + 1 == 3' failed: value was 42") != std::string::npos);
    CHECK(msg.find("This is a bug in Dynamo") != std::string::npos);
    CHECK(e.line() > 0);
  }
}

TEST_CASE("check macros evaluate their messages only on failure") {
  int evaluated = 0;
  auto message = [&] {
    ++evaluated;
    return std::string("m");
  };
  DYNAMO_INTERNAL_ASSERT(true, message());
  DYNAMO_USER_CHECK(true, UserErrorKind::kConfig, message());
  CHECK(evaluated == 0);
  auto failing = [&] { DYNAMO_USER_CHECK(false, UserErrorKind::kConfig, message()); };
  CHECK_THROWS_AS(failing(), UserError);
  CHECK(evaluated == 1);
}
