-- One `api` attempt per request, on 100,000 clients in turn, so that the
-- budget (600 a minute per client) is never what answers. Answers the limit's
-- policy gave (the store overloaded or late) are counted apart: "degraded".
local counter = 0
local headers = { ["Content-Type"] = "application/json" }
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  degraded = 0
end

request = function()
  counter = counter + 1
  local body = '{"keys": {"client": "c' .. (counter % 100000) .. '"}}'
  return wrk.format("POST", "/v1/limits/api/attempt", headers, body)
end

function response(status, headers, body)
  if string.find(body, '"degraded"', 1, true) then
    degraded = degraded + 1
  end
end

function done(summary, latency, requests)
  local n = 0
  for _, thread in ipairs(threads) do
    n = n + thread:get("degraded")
  end
  io.write("degraded: " .. n .. "\n")
end
