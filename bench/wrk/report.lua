-- Shared by the wrk scripts in this folder: prints one machine-readable
-- line that bench/run.sh parses. wrk counts a status >= 400 in
-- errors.status; socket errors (connect, read, write, timeout) apart.
function bench_report(summary, latency)
  local seconds = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format(
    "WRK_RESULT requests=%d seconds=%.3f req_per_s=%.1f p50_us=%d p99_us=%d max_us=%d " ..
    "status_errors=%d socket_errors=%d\n",
    summary.requests, seconds, summary.requests / seconds,
    latency:percentile(50), latency:percentile(99), latency.max,
    e.status, e.connect + e.read + e.write + e.timeout))
end
