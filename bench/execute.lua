-- wrk script: POST /execute (JSON mode) of a trivial statement, each wrk
-- thread on its own context.  Arguments (after --): TOKEN CONTEXT_ID...
-- Run with as many threads as connections (-t N -c N), one per context.
local threads = 0

function setup(thread)
   threads = threads + 1
   thread:set("id", threads)
end

function init(args)
   local ctx = args[id + 1]
   body = '{"code": "1+1", "context_id": "' .. ctx .. '"}'
   headers = {
      ["Content-Type"] = "application/json",
      ["Accept"] = "application/json",
      ["Authorization"] = "Bearer " .. args[1],
   }
end

function request()
   return wrk.format("POST", "/execute", headers, body)
end
