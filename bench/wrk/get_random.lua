-- GET /docs/<collection>/<prefix><n> for n uniform in [0, BENCH_IDS).
-- The request strings are built once in init(), so per request wrk only
-- draws a random number: the client's cost is the same for every server.
-- Env: BENCH_COLLECTION (bench), BENCH_ID_PREFIX (g), BENCH_IDS (10000).
local script_dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(script_dir .. "report.lua")

local requests = {}
local count

function init(args)
  local collection = os.getenv("BENCH_COLLECTION") or "bench"
  local prefix = os.getenv("BENCH_ID_PREFIX") or "g"
  count = tonumber(os.getenv("BENCH_IDS") or "10000")
  for n = 0, count - 1 do
    requests[n + 1] = wrk.format("GET", "/docs/" .. collection .. "/" .. prefix .. n)
  end
  math.randomseed(os.time())
end

function request()
  return requests[math.random(count)]
end

function done(summary, latency, requests)
  bench_report(summary, latency)
end
