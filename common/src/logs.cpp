// DYNAMO_LOGS, read by the C++ components (see logs.h).
#include "dynamo/common/logs.h"

#include <cstdlib>
#include <string>

namespace dynamo::common {

bool logEnabled(const char* what) {
  const char* v = std::getenv("DYNAMO_LOGS");
  if (!v) return false;
  std::string s = std::string(",") + v + ",";
  return s.find(std::string(",") + what + ",") != std::string::npos ||
         s.find(",all,") != std::string::npos;
}

}  // namespace dynamo::common
