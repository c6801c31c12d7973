-- wrk script for `bench/run.sh report` and bench/fleet.py: POST /report with batches of
-- EVENTS events (default 50), every id unique (thread number + the thread's request
-- counter + the event's index), so every event is stored and none is a duplicate.
--
-- With CREDENTIALS=FILE (lines `ID:HEX`, from POST /enrol), each request is one enrolled
-- device's: `Authorization: Device ID:HEX` and every event naming that device, the
-- devices taken in turn (a collector with --require-enrolment refuses anything else).
--
--   wrk -t2 -c16 -d10s -s bench/report.lua http://127.0.0.1:PORT/report
--   CREDENTIALS=creds EVENTS=10 wrk -t2 -c64 -d10s -s bench/report.lua http://127.0.0.1:PORT/report
local events = tonumber(os.getenv("EVENTS") or "50")
local run = os.getenv("RUN_ID") or "r"
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  devices = {}
  local path = os.getenv("CREDENTIALS")
  if path then
    for line in io.lines(path) do
      local id, hex = line:match("^([^:]+):(%x+)$")
      if id then table.insert(devices, {id = id, header = "Device " .. id .. ":" .. hex}) end
    end
  end
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

local function event(i, device)
  return string.format(
    '{"id":"%s-%d-%d-%d","time":"2026-11-22T21:30:00Z","device":"%s","app":"bench",' ..
    '"event":"updated","version":"2.0.0","previousVersion":"1.0.0","via":"patch","bytes":18234,' ..
    '"fullSize":912345,"durationMs":850}',
    run, tid, counter, i, device)
end

function request()
  counter = counter + 1
  local parts = {}
  if #devices > 0 then
    -- Threads start at different devices, so the connections spread over all of them.
    local device = devices[(counter + tid * 7) % #devices + 1]
    for i = 1, events do parts[i] = event(i, device.id) end
    local headers = {["Content-Type"] = "application/json", ["Authorization"] = device.header}
    return wrk.format(nil, nil, headers, '{"events":[' .. table.concat(parts, ",") .. ']}')
  end
  for i = 1, events do
    parts[i] = event(i, string.format("bench-device-%d", (counter * events + i) % 1000))
  end
  return wrk.format(nil, nil, nil, '{"events":[' .. table.concat(parts, ",") .. ']}')
end

function done(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read +
    summary.errors.write + summary.errors.timeout
  io.write(string.format("REPORT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d events_per_request=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), bad, events))
end
