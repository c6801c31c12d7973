-- wrk script for `bench/run.sh report`: POST /report with batches of EVENTS events
-- (default 50), every id unique (thread number + the thread's request counter + the
-- event's index), so every event is stored and none is a duplicate.
--
--   wrk -t2 -c16 -d10s -s bench/report.lua http://127.0.0.1:PORT/report
local events = tonumber(os.getenv("EVENTS") or "50")
local run = os.getenv("RUN_ID") or "r"
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  local parts = {}
  for i = 1, events do
    local device = (counter * events + i) % 1000
    parts[i] = string.format(
      '{"id":"%s-%d-%d-%d","time":"2026-11-22T21:30:00Z","device":"bench-device-%d","app":"bench",' ..
      '"event":"updated","version":"2.0.0","previousVersion":"1.0.0","via":"patch","bytes":18234,' ..
      '"fullSize":912345,"durationMs":850}',
      run, tid, counter, i, device)
  end
  return wrk.format(nil, nil, nil, '{"events":[' .. table.concat(parts, ",") .. ']}')
end

function done(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read +
    summary.errors.write + summary.errors.timeout
  io.write(string.format("REPORT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d events_per_request=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), bad, events))
end
