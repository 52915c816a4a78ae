-- PUT /docs/<collection>/<run>-<thread>-<counter> with a ~200-byte JSON
-- body: every request creates a new document, so every answer is one
-- durable, acknowledged write. Env: BENCH_COLLECTION (bench), BENCH_RUN
-- (a per-run prefix, so runs against one data dir never overwrite),
-- BENCH_DELAY_MS (a pause before each request on each connection: a
-- steady load below the server's limit, e.g. bench/cluster.py's lag phase).
local script_dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(script_dir .. "report.lua")

local next_thread = 0
function setup(thread)
  thread:set("thread_id", next_thread)
  next_thread = next_thread + 1
end

local base, headers, counter, path_prefix, pause
local body_bytes = 200

function init(args)
  local collection = os.getenv("BENCH_COLLECTION") or "bench"
  local run = os.getenv("BENCH_RUN") or "r"
  base = run .. "-" .. tostring(thread_id or 0) .. "-"
  headers = { ["Content-Type"] = "application/json" }
  path_prefix = "/docs/" .. collection .. "/"
  counter = 0
end

-- Defined only when asked for: wrk paces every request through a timer then.
if os.getenv("BENCH_DELAY_MS") then
  pause = tonumber(os.getenv("BENCH_DELAY_MS"))
  function delay()
    return pause
  end
end

local text = "a small durable write from the corvid put benchmark, " ..
             "one document per request, sixty-four clients at once "

function request()
  counter = counter + 1
  local id = base .. counter
  local head = '{"id":"' .. id .. '","n":' .. counter .. ',"text":"'
  local pad = body_bytes - #head - 2
  local body = head .. string.rep(text, 2):sub(1, pad) .. '"}'
  return wrk.format("PUT", path_prefix .. id, headers, body)
end

function done(summary, latency, requests)
  bench_report(summary, latency)
end
