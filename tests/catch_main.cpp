// The Catch2 main for every unit-test executable. Catch2 2.x (Debian 12) needs it compiled in one
// translation unit; Catch2 3.x brings its own main through Catch2::Catch2WithMain.
#ifdef DYNAMO_CATCH2_V2
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
