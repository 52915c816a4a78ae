// The one translation unit that holds Catch2's main(); every unit-test
// binary links it so the (slow to compile) runner is built once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
