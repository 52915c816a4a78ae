#!/usr/bin/env bash
# Installs what is needed, builds everything (Release) and runs every test:
# unit tests (Catch2) and end-to-end tests against the real binary (ctest).
# BUILD_DIR and CMAKE_ARGS select other builds, e.g. the sanitizers:
#   BUILD_DIR=build-asan CMAKE_ARGS="-DCORVID_ASAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo" scripts/test.sh
#   BUILD_DIR=build-tsan CMAKE_ARGS="-DCORVID_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo" scripts/test.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
cmake --build "$build"
cd "$build"
ctest --output-on-failure --timeout 900
