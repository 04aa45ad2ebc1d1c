// Small text formatting shared by every report (trace-store summaries, explain, profile).
#pragma once

#include <cstdint>
#include <string>

namespace dynamo {

/// A duration in microseconds for people: "1.23s" from a second up, else "12.3ms".
std::string formatMicroseconds(std::int64_t us);

}  // namespace dynamo
