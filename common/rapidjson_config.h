// Force-included before every source file (CMakeLists.txt), so that every
// RapidJSON instantiation sees the same settings. RapidJSON checks its own
// preconditions (GetString() on a value that is not a string, a missing
// member through operator[]) with RAPIDJSON_ASSERT, which is assert() and
// vanishes in Release builds: a request that reached one would read out
// of bounds. Here the check stays and throws, and the request's boundary
// answers 500 `internal` and logs it (common/faults.h). Input validation
// must keep every client value away from these checks; they are the net.
#pragma once

#include <stdexcept>

// Out of line and cold, so that the checks cost a predicted branch each
// in RapidJSON's hot loops and nothing more.
[[noreturn, gnu::cold, gnu::noinline]] inline void CorvidRapidJsonPreconditionFailed(const char* what) {
  throw std::logic_error(what);
}

#define RAPIDJSON_ASSERT(x)                                         \
  (__builtin_expect(static_cast<bool>(x), 1) ? static_cast<void>(0) \
                                             : CorvidRapidJsonPreconditionFailed("RapidJSON precondition failed: " #x))
