#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, README.md there) in build-asan
# (clang, ASan+UBSan: the folder scripts/test.sh's asan stage runs the suite
# in), runs each over a copy of its seed corpus, FUZZ_JOBS at a time, then
# replays every kept regression input (tests/fuzz/regressions/<target>/*).
# Exits non-zero if any target crashed or any regression input still crashes.
#
#   FUZZ_SECONDS  seconds per target (default 30: about 4 minutes for all
#                 on 2 cores)
#   FUZZ_JOBS     targets run at once (default: the number of cores)
#   FUZZ_TARGETS  targets to run, space- or comma-separated (default: all);
#                 regressions are replayed for these targets only
#   FUZZ_BUILD    build folder (default build-asan)
#   FUZZ_OUT      where new corpus entries and crash inputs are kept
#                 (default $FUZZ_BUILD/fuzz-out; the repository's corpus is
#                 never written)
#   FUZZ_ARGS     extra libFuzzer flags for every run (e.g. -jobs=2)
#
# One target for an hour:  FUZZ_SECONDS=3600 FUZZ_TARGETS=router scripts/fuzz.sh
# Beside other work (or at a low priority), add FUZZ_ARGS=-timeout=120:
# libFuzzer's -timeout is wall-clock, so a starved run reports a timeout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-$(nproc)}
build=${FUZZ_BUILD:-$root/build-asan}
out=${FUZZ_OUT:-$build/fuzz-out}
fuzz_dir=$root/tests/fuzz
all_targets="json_body bulk query definitions expression router analyze body_format log_entry backup manifest segment error_log mapreduce_format"
targets=${FUZZ_TARGETS:-$all_targets}
targets=${targets//,/ }

for t in $targets; do
  case " $all_targets " in
    *" $t "*) ;;
    *) echo "fuzz.sh: unknown target '$t' (one of: $all_targets)" >&2; exit 2 ;;
  esac
done

# Build (clang 14's libFuzzer; the fuzz flags apply to this folder only).
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ is missing (scripts/setup.sh installs it)" >&2
  exit 2
fi
if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^CORVID_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "fuzz.sh: $build was configured without CORVID_FUZZ (another compiler?): remove it" >&2
  exit 2
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCORVID_ASAN=ON -DCORVID_FUZZ=ON -DCORVID_BENCH=OFF >/dev/null
build_targets=()
for t in $targets; do build_targets+=("fuzz_$t"); done
cmake --build "$build" --target "${build_targets[@]}"

# Scratch files of the targets (stores, indexes, files to read), in memory
# when /dev/shm is there (the store fsyncs every write), removed at the end
# whatever happens.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  scratch=$(mktemp -d /dev/shm/corvid-fuzz.XXXXXX)
else
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/corvid-fuzz.XXXXXX")
fi
trap 'rm -rf "$scratch"' EXIT

mkdir -p "$out"
# run_target T: one target for $seconds; writes $out/T.result (a summary
# line, and "crashed" on the first line if it crashed).
run_target() {
  local t=$1 exe=$build/fuzz/fuzz_$1 corpus=$out/corpus/$1 artifacts=$out/crashes/$1 log=$out/$1.log rc
  mkdir -p "$corpus" "$artifacts"
  # A copy of the seeds, merged into what earlier runs found.
  if [ -d "$fuzz_dir/corpus/$t" ]; then cp -n "$fuzz_dir/corpus/$t"/* "$corpus"/ 2>/dev/null || true; fi
  local flags=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
               -artifact_prefix="$artifacts/")
  [ -f "$fuzz_dir/dict/$t.dict" ] && flags+=(-dict="$fuzz_dir/dict/$t.dict")
  # shellcheck disable=SC2206
  flags+=(${FUZZ_ARGS:-})
  set +e
  FUZZ_TMPDIR=$scratch "$exe" "${flags[@]}" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  local runs rate cov
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$({ grep -o 'cov: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  if [ "$rc" -ne 0 ]; then
    { echo crashed
      echo "$t: CRASHED after ${runs:-?} runs (log $log, input in $artifacts/)"
      grep -E 'ERROR:|INVARIANT|runtime error|SUMMARY' "$log" | head -5 || true
    } >"$out/$t.result"
  else
    echo "$t: ${runs:-?} runs, ${rate:-?} exec/s, coverage ${cov:-?}" >"$out/$t.result"
  fi
}

echo "==== fuzzing ${seconds}s per target, $jobs at a time"
running=0
for t in $targets; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  rm -f "$out/$t.result"
  echo "  $t"
  run_target "$t" &
  running=$((running + 1))
done
wait

failed=()
summary=()
for t in $targets; do
  if [ ! -f "$out/$t.result" ]; then
    failed+=("$t")
    summary+=("$t: no result (the run did not finish)")
  elif [ "$(head -1 "$out/$t.result")" = crashed ]; then
    failed+=("$t")
    summary+=("$(tail -n +2 "$out/$t.result")")
  else
    summary+=("$(cat "$out/$t.result")")
  fi
done

# Every kept crash input must no longer crash.
for t in $targets; do
  dir=$fuzz_dir/regressions/$t
  [ -d "$dir" ] || continue
  for input in "$dir"/*; do
    [ -f "$input" ] || continue
    set +e
    FUZZ_TMPDIR=$scratch "$build/fuzz/fuzz_$t" -rss_limit_mb=2048 -timeout=10 "$input" >"$out/replay.log" 2>&1
    rc=$?
    set -e
    if [ "$rc" -ne 0 ]; then
      failed+=("$t (regression ${input#"$root"/})")
      summary+=("$t: regression ${input#"$root"/} still crashes:")
      summary+=("$({ grep -E 'ERROR:|INVARIANT|runtime error|SUMMARY' "$out/replay.log" || true; } | head -3)")
    else
      summary+=("$t: regression ${input#"$root"/} passes")
    fi
  done
done

echo "==== fuzz summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
