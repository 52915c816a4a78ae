#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, README.md there) in build-fuzz
# with clang, runs each over a copy of its seed corpus, then replays every
# kept regression input (tests/fuzz/regressions/<target>/*). Exits non-zero
# if any target crashed or any regression input still crashes.
#
#   FUZZ_SECONDS  seconds per target (default 30: about 7 minutes for all)
#   FUZZ_TARGETS  targets to run, space- or comma-separated (default: all);
#                 regressions are replayed for these targets only
#   FUZZ_BUILD    build folder (default build-fuzz)
#   FUZZ_OUT      where new corpus entries and crash inputs are kept
#                 (default $FUZZ_BUILD/fuzz-out; the repository's corpus is
#                 never written)
#   FUZZ_ARGS     extra libFuzzer flags for every run (e.g. -jobs=2)
#
# One target for an hour:  FUZZ_SECONDS=3600 FUZZ_TARGETS=router scripts/fuzz.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${FUZZ_SECONDS:-30}
build=${FUZZ_BUILD:-$root/build-fuzz}
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
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCORVID_FUZZ=ON -DCORVID_BENCH=OFF >/dev/null
fi
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

failed=()
summary=()
mkdir -p "$out"
for t in $targets; do
  exe=$build/fuzz/fuzz_$t
  corpus=$out/corpus/$t
  artifacts=$out/crashes/$t
  mkdir -p "$corpus" "$artifacts"
  # A copy of the seeds, merged into what earlier runs found.
  if [ -d "$fuzz_dir/corpus/$t" ]; then cp -n "$fuzz_dir/corpus/$t"/* "$corpus"/ 2>/dev/null || true; fi
  flags=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
         -artifact_prefix="$artifacts/")
  [ -f "$fuzz_dir/dict/$t.dict" ] && flags+=(-dict="$fuzz_dir/dict/$t.dict")
  # shellcheck disable=SC2206
  flags+=(${FUZZ_ARGS:-})
  log=$out/$t.log
  echo "==== $t (${seconds}s)"
  set +e
  FUZZ_TMPDIR=$scratch "$exe" "${flags[@]}" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$({ grep -o 'cov: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    summary+=("$t: CRASHED after ${runs:-?} runs (log $log, input in $artifacts/)")
    grep -E 'ERROR:|INVARIANT|runtime error|SUMMARY' "$log" | head -5 || true
  else
    summary+=("$t: ${runs:-?} runs, ${rate:-?} exec/s, coverage ${cov:-?}")
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
