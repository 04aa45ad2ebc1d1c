// DYNAMO_LOGS for the C++ components that print their own log lines (the fused backend's
// decisions and generated code, the kernel cache's fallbacks); python/dynamo/logs.py parses the
// same variable for the compile logs.
#pragma once

namespace dynamo::common {

/// Whether DYNAMO_LOGS (comma-separated, read at each call) names the log `what` ("fusion": the
/// fused backend's and the kernel cache's decisions; "output_code": generated code) or "all".
bool logEnabled(const char* what);

}  // namespace dynamo::common
