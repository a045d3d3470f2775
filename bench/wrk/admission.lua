-- wrk script for bench/bench_admission.py: POST the AdmissionReview in $BENCH_BODY_FILE
-- and print one machine-readable line of figures when the run ends.
local path = os.getenv("BENCH_BODY_FILE")
local file = assert(io.open(path, "rb"), "BENCH_BODY_FILE not readable: " .. tostring(path))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"max_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end
