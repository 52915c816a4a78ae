#!/usr/bin/env bash
# bench/run.sh: the one entry point for Corvid's benchmarks (STYLE.md #9).
# Builds the Release programs, then measures each workload RUNS times and
# prints what it measured, on what machine, as medians (min, max), beside
# the peer measured in the same run. To add a workload: write section_<name>
# (measure with `measure`, keep figures with `record`) and report_<name>,
# and add <name> to SECTIONS.
#
#   bench/run.sh [http|put|bulk|w1|w2|analyzers|mapreduce|postings|all]...   (default: all)
#
# Env: BUILD_DIR (default <repo>/build), RUNS (5), DURATION (wrk, 10s),
#      CONNECTIONS (64), THREADS (server threads; default: the servers'
#      own default, the core count), BUILD_JOBS (ninja -j; default ninja's),
#      SKIP_BUILD=1 (use the binaries already in BUILD_DIR),
#      BULK_MB (128), BULK_REQUEST_MB (32), BULK_CONNECTIONS (1),
#      MIN_IDLE (80: before each run, wait for the machine to be this % idle),
#      IDLE_WAIT (600: the most seconds to wait for it),
#      MAX_OTHERS (10: a run in which other processes used more than this %
#      of the machine's CPU is disturbed and repeated), RETRIES (2),
#      BENCH_TMP (where data dirs go; must be on the disk under test;
#      default ${TMPDIR:-/tmp}).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="$ROOT/bench"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
RUNS="${RUNS:-5}"
DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-}"
BULK_MB="${BULK_MB:-128}"
BULK_REQUEST_MB="${BULK_REQUEST_MB:-32}"
BULK_CONNECTIONS="${BULK_CONNECTIONS:-1}"
MIN_IDLE="${MIN_IDLE:-80}"
IDLE_WAIT="${IDLE_WAIT:-600}"
MAX_OTHERS="${MAX_OTHERS:-10}"
RETRIES="${RETRIES:-2}"
GET_DOCS=10000
SECTIONS=(http put bulk w1 w2 analyzers mapreduce postings)

# ---------------------------------------------------------------- helpers

log() { printf '%s\n' "$*"; }
die() { printf 'bench/run.sh: %s\n' "$*" >&2; exit 1; }

WORK="$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/corvid-bench.XXXXXX")"
RESULTS="$WORK/results"   # one file per figure, one value per line
mkdir -p "$RESULTS"
SERVER_PIDS=()
DISTURBED_RUNS=0

cleanup() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# record FIGURE VALUE: append one run's value of a figure.
record() { printf '%s\n' "$2" >>"$RESULTS/$1"; }

# stats FIGURE -> "median min max" (median of an even count: the mean of
# the middle two).
stats() {
  sort -g "$RESULTS/$1" | awk '{ v[NR] = $1 }
    END { if (NR == 0) { print "n/a n/a n/a"; exit }
          m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "%.6g %.6g %.6g\n", m, v[1], v[NR] }'
}
median() { stats "$1" | awk '{ print $1 }'; }

# show LABEL FIGURE UNIT: one line "label  median unit (min, max; n runs)".
show() {
  local s n med lo hi
  s=$(stats "$2")
  n=$(wc -l <"$RESULTS/$2" 2>/dev/null || echo 0)
  read -r med lo hi <<<"$s"
  printf '  %-44s %12s %-6s (min %s, max %s; %d runs)\n' "$1" "$med" "$3" "$lo" "$hi" "$n"
}

# field NAME LINE: the value of NAME=value in a key=value line.
field() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }

us_to_ms() { awk -v u="$1" 'BEGIN { print u / 1000 }'; }

find_bin() {
  local name="$1" path
  for path in "$BUILD_DIR/$name" "$BUILD_DIR/server/$name" "$BUILD_DIR/bench/$name"; do
    [ -x "$path" ] && { printf '%s\n' "$path"; return; }
  done
  die "no $name in $BUILD_DIR (build failed?)"
}

# ------------------------------------------------- a quiet machine

# On 2 cores any other process skews every figure. Before each run we wait
# (at most IDLE_WAIT s) for the machine to be MIN_IDLE% idle; during it we
# account for the CPU time of the server and the client, so that what
# anything else used is known (OTHERS_PCT) and a disturbed run is repeated.

idle_percent() {  # over one second
  local a b total=0 i
  a=($(head -n1 /proc/stat)); sleep 1; b=($(head -n1 /proc/stat))
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  echo $(( total > 0 ? 100 * (b[4] - a[4]) / total : 0 ))
}

wait_quiet() {
  local idle waited=0 busy=""
  idle=$(idle_percent)
  while [ "$idle" -lt "$MIN_IDLE" ] && [ "$waited" -lt "$IDLE_WAIT" ]; do
    sleep 4; waited=$((waited + 5)); idle=$(idle_percent)
  done
  if [ "$idle" -lt "$MIN_IDLE" ]; then
    busy=$(top -b -n2 -d0.5 -w 200 2>/dev/null | awk '/^top -/ { n++ }
      n == 2 && $1 ~ /^[0-9]+$/ && $9 + 0 > 10 { printf "%s(%s%%) ", $12, $9 }')
  fi
  QUIET_NOTE="idle ${idle}% before"
  if [ "$waited" -gt 0 ]; then QUIET_NOTE+=" (waited ${waited}s)"; fi
  QUIET_NOTE+="${busy:+, busy: $busy}"
}

proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# measure SERVER_PID CMD... : runs CMD, its stdout into MEASURED_OUT, and
# sets OTHERS_PCT, the share of all cores' time during CMD used by
# anything but the server and CMD. Returns CMD's status.
measure() {
  local spid="$1"; shift
  local a b p0 p1 i total=0 busy client rc=0
  a=($(head -n1 /proc/stat)); p0=$(proc_ticks "$spid")
  MEASURED_OUT=$("$@"; rc=$?; times >"$WORK/times"; exit $rc) || rc=$?
  b=($(head -n1 /proc/stat)); p1=$(proc_ticks "$spid")
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  busy=$((total - (b[4] - a[4]) - (b[5] - a[5])))
  # `times` line 2: the children's user and system time, e.g. "0m9.870s 0m2.110s".
  client=$(sed -n 2p "$WORK/times" | tr 'ms' '  ' | awk -v hz="$(getconf CLK_TCK)" \
    '{ printf "%d", (($1 * 60 + $2) + ($3 * 60 + $4)) * hz }')
  OTHERS_PCT=$(awk -v o="$((busy - (p1 - p0) - client))" -v t="$total" \
    'BEGIN { v = t > 0 ? 100 * o / t : 0; printf "%d", v < 0 ? 0 : v }')
  return $rc
}

# ---------------------------------------------------------------- servers

# start_server NAME CMD... : starts a server that prints "... listening on
# HOST:PORT"; sets SERVER_PID and SERVER_ADDR.
start_server() {
  local name="$1"; shift
  local out="$WORK/$name.$RANDOM.out" i
  : >"$out"
  "$@" >>"$out" 2>"$out.err" &
  SERVER_PID=$!
  SERVER_PIDS+=("$SERVER_PID")
  for i in $(seq 1 300); do
    SERVER_ADDR=$(sed -n 's/.* listening on \(.*\)$/\1/p' "$out" | head -n1) || true
    [ -n "$SERVER_ADDR" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$out.err" >&2; die "$name exited at start"; }
    sleep 0.1
  done
  die "$name did not print its address within 30 s"
}

stop_server() {
  local pid="$1" i p kept=()
  for p in "${SERVER_PIDS[@]}"; do [ "$p" = "$pid" ] || kept+=("$p"); done
  SERVER_PIDS=("${kept[@]}")
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  log "  (pid $pid ignored SIGTERM for 10 s; killed)"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

start_corvid() {  # start_corvid DATA_DIR
  local args=(serve --data "$1" --listen 127.0.0.1:0)
  [ -n "$THREADS" ] && args+=(--threads "$THREADS")
  start_server corvid "$CORVID" "${args[@]}"
}

start_bare_beast() {
  local args=(--listen 127.0.0.1:0)
  [ -n "$THREADS" ] && args+=(--threads "$THREADS")
  start_server bare_beast "$BARE_BEAST" "${args[@]}"
}

# run_wrk SCRIPT ADDR [DURATION] -> the WRK_RESULT line (env passes through).
run_wrk() {
  wrk -t1 -c"$CONNECTIONS" -d"${3:-$DURATION}" -s "$BENCH/wrk/$1" "http://$2" \
    | sed -n 's/^WRK_RESULT //p'
}

# ---------------------------------------------------------------- machine

machine_info() {
  local rev
  rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
  [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null | head -n1)" ] && rev="$rev + uncommitted changes"
  log "== Corvid benchmarks  $(date -u '+%Y-%m-%d %H:%M UTC')"
  log "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)," \
      "$(awk '/MemTotal/ { printf "%.1f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
  log "kernel:  $(uname -srm)"
  log "disk:    $(df -hT "$WORK" | awk 'NR == 2 { print $1, $2, "(" $3 ")" }') for data dirs in $WORK"
  log "client:  $(wrk -v 2>&1 | head -n1 | cut -d' ' -f1-2): wrk -t1 -c$CONNECTIONS -d$DURATION on the same cores as the server"
  log "build:   $BUILD_DIR ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt")," \
      "$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")), source $rev"
  log "runs:    $RUNS per figure, each figure the median (min, max); a run is repeated (up to $RETRIES times)" \
      "when other processes used more than $MAX_OTHERS% of the CPU during it"
}

# ---------------------------------------------------------------- build

build() {
  if [ "${SKIP_BUILD:-0}" != 1 ] && [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -G Ninja -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  local cache="$BUILD_DIR/CMakeCache.txt"
  [ -f "$cache" ] || die "$BUILD_DIR is not a CMake build dir"
  grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$cache" \
    || die "$BUILD_DIR is not a Release build; use BUILD_DIR=<another dir>"
  if grep -Eq '^CORVID_(ASAN|TSAN):BOOL=ON$' "$cache"; then
    die "$BUILD_DIR has sanitizers on; use BUILD_DIR=<another dir>"
  fi
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    ninja -C "$BUILD_DIR" ${BUILD_JOBS:+-j"$BUILD_JOBS"} corvid bare_beast bulk_load \
      analyzers_bench mapreduce_bench postings_bench >/dev/null \
      || die "build failed (ninja -C $BUILD_DIR corvid bare_beast bulk_load *_bench)"
  fi
  # Private copies: a rebuild during the run must not swap a binary under it.
  mkdir -p "$WORK/bin"
  cp "$(find_bin corvid)" "$(find_bin bare_beast)" "$(find_bin bulk_load)" "$WORK/bin/"
  CORVID="$WORK/bin/corvid"
  BARE_BEAST="$WORK/bin/bare_beast"
  BULK_LOAD="$WORK/bin/bulk_load"
}

# ---------------------------------------------------------------- http

# (a) GET one document by id (random among 10,000 of ~200 bytes),
# keep-alive, CONNECTIONS connections; the peer answers the same requests
# with a fixed 200-byte body. Both servers stay up for the whole section
# and are measured back to back, alternating which goes first.
section_http() {
  log ""
  log "== http: GET /docs/bench/{id}, random among $GET_DOCS docs of 200 B; peer: bare_beast"
  local data="$WORK/http-data"
  mkdir -p "$data"
  start_corvid "$data"; local corvid_pid=$SERVER_PID corvid_addr=$SERVER_ADDR
  "$BULK_LOAD" --target "$corvid_addr" --collection bench --id-prefix g \
    --docs "$GET_DOCS" --doc-bytes 200 --request-mb 64 >/dev/null
  start_bare_beast; local bare_pid=$SERVER_PID bare_addr=$SERVER_ADDR
  local sample
  sample=$(curl -s -o /dev/null -w '%{http_code} %{size_download}' "http://$corvid_addr/docs/bench/g1234")
  log "  corvid at $corvid_addr (GET sample: status, bytes = $sample), bare_beast at $bare_addr"
  [ "${sample%% *}" = 200 ] || die "corvid does not serve the loaded documents"

  export BENCH_COLLECTION=bench BENCH_ID_PREFIX=g BENCH_IDS=$GET_DOCS
  run_wrk get_random.lua "$corvid_addr" 2s >/dev/null   # warm-up
  run_wrk get_random.lua "$bare_addr" 2s >/dev/null
  local r attempt name pid addr worst order
  declare -A line others
  for r in $(seq 1 "$RUNS"); do
    order=(corvid bare)
    [ $((r % 2)) = 0 ] && order=(bare corvid)
    for attempt in $(seq 0 "$RETRIES"); do
      wait_quiet
      log "  run $r: $QUIET_NOTE"
      worst=0
      for name in "${order[@]}"; do
        if [ "$name" = corvid ]; then pid=$corvid_pid addr=$corvid_addr; else pid=$bare_pid addr=$bare_addr; fi
        measure "$pid" run_wrk get_random.lua "$addr"
        line[$name]=$MEASURED_OUT others[$name]=$OTHERS_PCT
        [ "$OTHERS_PCT" -gt "$worst" ] && worst=$OTHERS_PCT
        log "  run $r $name: ${line[$name]} others_cpu=${OTHERS_PCT}%"
      done
      [ "$worst" -le "$MAX_OTHERS" ] && break
      if [ "$attempt" -lt "$RETRIES" ]; then log "  run $r disturbed; again"; else DISTURBED_RUNS=$((DISTURBED_RUNS + 1)); fi
    done
    for name in corvid bare; do
      record "get_${name}_rps" "$(field req_per_s "${line[$name]}")"
      record "get_${name}_p99_ms" "$(us_to_ms "$(field p99_us "${line[$name]}")")"
      record "get_${name}_errors" "$(($(field status_errors "${line[$name]}") + $(field socket_errors "${line[$name]}")))"
    done
    record get_ratio "$(awk -v c="$(field req_per_s "${line[corvid]}")" \
      -v b="$(field req_per_s "${line[bare]}")" 'BEGIN { printf "%.3f", c / b }')"
  done
  stop_server "$corvid_pid"
  stop_server "$bare_pid"
  unset BENCH_COLLECTION BENCH_ID_PREFIX BENCH_IDS
}

report_http() {
  [ -s "$RESULTS/get_ratio" ] || return 0
  log "GET by id, keep-alive, $CONNECTIONS connections (wrk -t1):"
  show "corvid req/s" get_corvid_rps "req/s"
  show "bare_beast req/s (peer, same runs)" get_bare_rps "req/s"
  show "corvid / bare_beast (per run)" get_ratio "x"
  show "corvid p99 latency" get_corvid_p99_ms "ms"
  show "bare_beast p99 latency" get_bare_p99_ms "ms"
  show "errors (non-2xx + socket), corvid" get_corvid_errors ""
  verdict "GET >= 60% of bare Beast" "$(median get_ratio)" 0.60
}

# ---------------------------------------------------------------- put

# (b) Durable single-document PUTs: CONNECTIONS keep-alive clients, every
# request creates a new ~200-byte document. A fresh server and data dir per
# attempt. Afterwards /collections must count at least every acknowledged PUT.
section_put() {
  log ""
  log "== put: PUT /docs/bench/{unique id}, ~200 B JSON, $CONNECTIONS clients, durable"
  local r attempt line data count acked errors
  for r in $(seq 1 "$RUNS"); do
    for attempt in $(seq 0 "$RETRIES"); do
      wait_quiet
      data="$WORK/put-data-$r"
      rm -rf "$data"; mkdir -p "$data"
      start_corvid "$data"
      BENCH_COLLECTION=bench BENCH_RUN="r$r" measure "$SERVER_PID" run_wrk put_unique.lua "$SERVER_ADDR"
      line=$MEASURED_OUT
      count=$(curl -s "http://$SERVER_ADDR/collections" | python3 -c '
import json, sys
print(sum(c["count"] for c in json.load(sys.stdin)["collections"] if c["name"] == "bench"))')
      stop_server "$SERVER_PID"
      rm -rf "$data"
      log "  run $r: $QUIET_NOTE"
      log "  run $r: $line stored=$count others_cpu=${OTHERS_PCT}%"
      [ "$OTHERS_PCT" -le "$MAX_OTHERS" ] && break
      if [ "$attempt" -lt "$RETRIES" ]; then log "  run $r disturbed; again"; else DISTURBED_RUNS=$((DISTURBED_RUNS + 1)); fi
    done
    acked=$(field requests "$line")
    errors=$(($(field status_errors "$line") + $(field socket_errors "$line")))
    record put_wps "$(field req_per_s "$line")"
    record put_p99_ms "$(us_to_ms "$(field p99_us "$line")")"
    record put_errors "$errors"
    # wrk counts a request once its answer arrived; PUTs in flight at the
    # end may be stored without being counted, so stored >= acknowledged.
    record put_missing "$(( count >= acked - errors ? 0 : acked - errors - count ))"
  done
  # Context: what one synchronous 4 KiB write costs on this disk.
  local f="$WORK/dsync.tmp" secs
  secs=$( { dd if=/dev/zero of="$f" bs=4k count=1000 oflag=dsync 2>&1 >/dev/null; } \
    | sed -n 's/.* copied, \([0-9.]*\) s.*/\1/p')
  rm -f "$f"
  DSYNC_PER_S=$(awk -v s="$secs" 'BEGIN { printf "%.0f", 1000 / s }')
}

report_put() {
  [ -s "$RESULTS/put_wps" ] || return 0
  log "Durable single-document PUT, $CONNECTIONS clients (wrk -t1):"
  show "acknowledged writes/s" put_wps "/s"
  show "p99 latency" put_p99_ms "ms"
  show "errors (non-2xx + socket)" put_errors ""
  show "acknowledged but not stored" put_missing ""
  log "  context: dd bs=4k count=1000 oflag=dsync on this disk: ${DSYNC_PER_S:-?} synced writes/s"
  verdict "PUT >= 20,000 acknowledged writes/s" "$(median put_wps)" 20000
}

# ---------------------------------------------------------------- bulk

# (c) Bulk NDJSON load of 1 KB documents: BULK_MB MB as BULK_REQUEST_MB MB
# requests over BULK_CONNECTIONS connection(s), fresh server and data dir
# per attempt; MB/s of body bytes acknowledged. No peer: the disk's raw
# sequential fsync'd write speed (dd) is measured in the same runs.
section_bulk() {
  log ""
  log "== bulk: POST /docs/bulk/_bulk, ${BULK_MB} MB of 1 KB docs in ${BULK_REQUEST_MB} MB requests," \
      "$BULK_CONNECTIONS connection(s); context: dd of 256 MiB, O_DIRECT + fsync"
  local r attempt line data ddf ddline size
  for r in $(seq 1 "$RUNS"); do
    for attempt in $(seq 0 "$RETRIES"); do
      wait_quiet
      data="$WORK/bulk-data-$r"
      rm -rf "$data"; mkdir -p "$data"
      start_corvid "$data"
      measure "$SERVER_PID" "$BULK_LOAD" --target "$SERVER_ADDR" --collection bulk --doc-bytes 1024 \
        --total-mb "$BULK_MB" --request-mb "$BULK_REQUEST_MB" --connections "$BULK_CONNECTIONS" \
        || die "bulk load failed: $MEASURED_OUT"
      line=${MEASURED_OUT#bulk_load }
      stop_server "$SERVER_PID"
      size=$(du -sm "$data" | cut -f1)
      rm -rf "$data"
      log "  run $r: $QUIET_NOTE"
      log "  run $r: corvid $line others_cpu=${OTHERS_PCT}% data_dir=${size}MiB"
      [ "$OTHERS_PCT" -le "$MAX_OTHERS" ] && break
      if [ "$attempt" -lt "$RETRIES" ]; then log "  run $r disturbed; again"; else DISTURBED_RUNS=$((DISTURBED_RUNS + 1)); fi
    done
    record bulk_mbps "$(field mb_per_s "$line")"

    ddf="$WORK/dd.tmp"
    ddline=$(dd if=/dev/zero of="$ddf" bs=1M count=256 oflag=direct conv=fsync 2>&1 | tail -n1)
    rm -f "$ddf"
    log "  run $r: dd: $ddline"
    # dd prints "..., 1.23 s, 218 MB/s" (or kB/s, GB/s): normalise to MB/s.
    record dd_mbps "$(awk -F', ' '{ split($NF, a, " "); v = a[1]; u = a[2]
      if (u ~ /^kB/) v /= 1000; else if (u ~ /^GB/) v *= 1000; print v }' <<<"$ddline")"
  done
}

report_bulk() {
  [ -s "$RESULTS/bulk_mbps" ] || return 0
  log "Bulk NDJSON load, 1 KB docs (MB = 10^6 bytes of request body, acknowledged):"
  show "corvid bulk load" bulk_mbps "MB/s"
  show "disk: dd 256 MiB oflag=direct conv=fsync" dd_mbps "MB/s"
  verdict "bulk >= 150 MB/s" "$(median bulk_mbps)" 150
}

# ---------------------------------------------------------------- summary

verdict() {  # verdict TEXT VALUE BAR
  if awk -v v="$2" -v b="$3" 'BEGIN { exit !(v >= b) }'; then
    log "  bar: $1 -- met (median $2)"
  else
    log "  bar: $1 -- NOT met (median $2)"
  fi
}

report() {
  local s
  log ""
  log "== summary (medians of $RUNS runs)"
  if [ "$DISTURBED_RUNS" -gt 0 ]; then
    log "  WARNING: $DISTURBED_RUNS run(s) kept although other processes used more than $MAX_OTHERS% of the CPU"
  fi
  for s in "${SECTIONS[@]}"; do "report_$s"; done
}

# ------------------------------------------------------ component benchmarks
# These programs take their own runs and print their own medians beside the
# peer they measure in the same run (SQLite, Xapian, a plain ICU loop);
# this script only runs them, so their output is the report.

COMPONENT_OUTPUT=()

# W1 over HTTP: load 100k (then 1M) docs with the map/reduce index defined,
# until the index is not stale; SQLite GROUP BY in the same runs.
section_w1() {
  log ""
  log "== w1: map/reduce indexing over HTTP (bench/w1_mapreduce_http.py)"
  local out
  out=$(python3 "$BENCH/w1_mapreduce_http.py" --binary "$CORVID" --runs "$RUNS" --docs 100000)
  log "$out"
  COMPONENT_OUTPUT+=("$out")
  out=$(python3 "$BENCH/w1_mapreduce_http.py" --binary "$CORVID" --runs "$RUNS" --docs 1000000 --per-request 50000)
  log "$out"
  COMPONENT_OUTPUT+=("$out")
}
report_w1() { :; }

# W2 over HTTP: search indexing through the server and one-client query
# latency per query type (the in-process engine and its peers: postings).
section_w2() {
  log ""
  log "== w2: search over HTTP (bench/w2_search_http.py)"
  log "$(python3 "$BENCH/w2_search_http.py" --binary "$CORVID" --docs 100000 --queries 1000)"
}
report_w2() { :; }

component_bench() {  # name, then the program's arguments
  local name=$1; shift
  local bin
  bin=$(find_bin "$name") || die "$name not built"
  log ""
  log "== $name $*"
  local out
  out=$("$bin" "$@")
  log "$out"
}
section_analyzers() { component_bench analyzers_bench "$RUNS"; }
report_analyzers() { :; }
section_mapreduce() { component_bench mapreduce_bench --runs "$RUNS"; }
report_mapreduce() { :; }
section_postings() { component_bench postings_bench; }
report_postings() { :; }

main() {
  local wanted=("$@") s
  [ ${#wanted[@]} -eq 0 ] && wanted=(all)
  for s in "${wanted[@]}"; do
    [ "$s" = all ] && continue
    [[ " ${SECTIONS[*]} " == *" $s "* ]] || die "unknown section '$s' (want: all ${SECTIONS[*]})"
  done
  command -v wrk >/dev/null || die "wrk is not installed (scripts/setup.sh)"
  build
  machine_info
  for s in "${wanted[@]}"; do
    if [ "$s" = all ]; then
      for s in "${SECTIONS[@]}"; do "section_$s"; done
    else
      "section_$s"
    fi
  done
  report
}

main "$@"
