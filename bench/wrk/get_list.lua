-- GET the request paths listed in the file $BENCH_PATHS (one per line), in
-- order and round again, on one connection: the C client adds microseconds
-- where a Python one adds its own parsing and pauses to every latency.
-- Used by bench/w2_search_http.py --wrk.
local script_dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(script_dir .. "report.lua")

local requests = {}
local next_request = 0

function init(args)
  for line in io.lines(os.getenv("BENCH_PATHS")) do
    requests[#requests + 1] = wrk.format("GET", line)
  end
end

function request()
  next_request = next_request % #requests + 1
  return requests[next_request]
end

function done(summary, latency, requests)
  bench_report(summary, latency)
end
