// Report text formatting (see format.h).
#include "dynamo/common/format.h"

#include <cstdio>

namespace dynamo {

std::string formatMicroseconds(std::int64_t us) {
  char buf[32];
  if (us >= 1000000)
    std::snprintf(buf, sizeof buf, "%.2fs", static_cast<double>(us) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1fms", static_cast<double>(us) / 1e3);
  return buf;
}

}  // namespace dynamo
