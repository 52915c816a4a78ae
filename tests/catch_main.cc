// The one translation unit that holds Catch2's main(); every unit-test
// binary links it so the (slow to compile) runner is built once. Logs
// (common/log.h) at warn and above, so that a run's output stays the
// tests' own; the log lines' content is tested by e2e_logging.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "common/log.h"

int main(int argc, char* argv[]) {
  corvid::logging::Configure(corvid::logging::Format::kText, corvid::logging::Level::kWarn);
  return Catch::Session().run(argc, argv);
}
