// Includes Catch2 whichever major version is installed: 2.x (Debian 12) or 3.x (the GPU machine).
// Test sources include this header only, and use the macros common to both versions.
#pragma once
#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#else
#include <catch2/catch.hpp>
#endif
