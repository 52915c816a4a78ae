#!/usr/bin/env bash
# Installs what is needed, builds and runs every test, in four stages:
#   release  the Release build (gcc) and the whole suite (unit + end-to-end),
#            two tests at a time
#   asan     an ASan+UBSan build with clang (build-asan, where the libFuzzer
#            targets build too) and the whole suite in it, two tests at a
#            time (the crash and cluster tests alone)
#   tsan     a TSan build with clang (build-tsan) and the concurrency tests
#            in it (indexing, the store but its [heavy] single-threaded
#            oracles, the cluster log, e2e indexes/search/crash; postings
#            by hand, see below)
#   fuzz     every libFuzzer target over its corpus for $FUZZ_SECONDS
#            (default 30), two at a time, and every kept regression input
#            (scripts/fuzz.sh, in build-asan)
# All four run by default (CI's command); CORVID_TEST_STAGES picks some, e.g.
#   CORVID_TEST_STAGES=release scripts/test.sh
# The sanitizer stages build with clang: it compiles this code about twice
# as fast as gcc, which keeps the whole run inside CI's budget.
# BUILD_DIR and CMAKE_ARGS change the release stage's build (e.g. another
# folder). Each stage reuses its build folder, so a second run only
# rebuilds what changed. Prints each stage's time at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stages=${CORVID_TEST_STAGES:-release asan tsan fuzz}
"$root/scripts/setup.sh"

times=()
stage_start=0
begin() { stage_start=$(date +%s); echo "==== stage $1"; }
end() { times+=("$1 $(( $(date +%s) - stage_start )) s"); }

# configure DIR CMAKE-ARGS...: configures DIR (Ninja).
configure() {
  local dir=$1
  shift
  cmake -S "$root" -B "$dir" -G Ninja "$@" >/dev/null
}

for stage in $stages; do
  case $stage in
    release)
      begin release
      # shellcheck disable=SC2086
      configure "${BUILD_DIR:-$root/build}" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
      cmake --build "${BUILD_DIR:-$root/build}"
      # Two tests at a time; those that load both cores or time themselves
      # run alone (RUN_SERIAL in tests/e2e/CMakeLists.txt).
      (cd "${BUILD_DIR:-$root/build}" && ctest --output-on-failure --timeout 900 -j2)
      end release
      ;;
    asan)
      begin asan
      # The same configuration scripts/fuzz.sh builds its targets in.
      configure "$root/build-asan" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCORVID_ASAN=ON -DCORVID_FUZZ=ON -DCORVID_BENCH=OFF
      cmake --build "$root/build-asan"
      # Memory bounds are Release figures (the sanitizers' shadow memory is
      # not ours). UBSan halts on any report (-fno-sanitize-recover).
      (cd "$root/build-asan" && CORVID_SKIP_RSS=1 CORVID_SANITIZER_BUILD=1 \
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:report_error_type=1 \
        ctest --output-on-failure --timeout 1800 -j2 -E '^browser_console$')
      end asan
      ;;
    tsan)
      begin tsan
      configure "$root/build-tsan" -DCMAKE_CXX_COMPILER=clang++ -DCORVID_TSAN=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORVID_BENCH=OFF
      # Only what the concurrency tests run. postings_tests is built and run
      # by hand here (`cmake --build build-tsan --target postings_tests &&
      # cd build-tsan && ctest -R postings_tests`): under TSan it takes longer
      # than CI's whole budget leaves; its merges and queries run
      # concurrently inside the server in e2e_indexes and e2e_search.
      cmake --build "$root/build-tsan" --target corvid common_tests indexing_tests storage_tests cluster_tests
      # A race ends the process that has it (exit 66): a unit test or a
      # server under an e2e test then fails.
      (cd "$root/build-tsan" && CORVID_SKIP_RSS=1 CORVID_SANITIZER_BUILD=1 \
        TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$root/tests/tsan.supp" \
        ctest --output-on-failure --timeout 1800 \
          -R '^(common_tests|indexing_tests|storage_tests|cluster_tests|e2e_indexes|e2e_search|e2e_crash)$')
      end tsan
      ;;
    fuzz)
      begin fuzz
      if [ -x "$root/scripts/fuzz.sh" ]; then
        FUZZ_BUILD="$root/build-asan" FUZZ_SECONDS=${FUZZ_SECONDS:-30} "$root/scripts/fuzz.sh"
      else
        echo "scripts/fuzz.sh is missing"
        exit 1
      fi
      end fuzz
      ;;
    *)
      echo "unknown stage '$stage' (release, asan, tsan, fuzz)" >&2
      exit 2
      ;;
  esac
done
printf '%s\n' "${times[@]}"
