-- One code-verify attempt per request, each on the next of 1,000,000 codes
-- (from the offset the slice is given, so slices carry on where the last one
-- stopped), paced by a fixed delay per connection. Counts the answers that
-- were not the store's (degraded) and the ones that were neither 200 nor 429.
local headers = { ["Content-Type"] = "application/json" }
local offset, delay_ms = 0, 10
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  offset = tonumber(args[1]) or 0
  delay_ms = tonumber(args[2]) or 10
  counter = 0
  degraded = 0
  unexpected = 0
end

function delay()
  return delay_ms
end

request = function()
  counter = counter + 1
  local body = '{"keys": {"code": "soak-' .. ((offset + counter) % 1000000) .. '"}}'
  return wrk.format("POST", "/v1/limits/code-verify/attempt", headers, body)
end

function response(status, headers, body)
  if string.find(body, '"degraded"', 1, true) then
    degraded = degraded + 1
  end
  if status ~= 200 and status ~= 429 then
    unexpected = unexpected + 1
  end
end

function done(summary, latency, requests)
  local d, u = 0, 0
  for _, thread in ipairs(threads) do
    d = d + thread:get("degraded")
    u = u + thread:get("unexpected")
  end
  io.write("degraded: " .. d .. "\nunexpected: " .. u .. "\n")
end
