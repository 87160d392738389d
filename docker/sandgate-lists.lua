-- HAProxy Lua (docker/haproxy-config.sh loads it): GET /contexts,
-- GET /api/kernels and GET /api/sessions answered with the lists of every
-- replica that is up, joined — what one sandgate would list.  Each replica
-- is asked with the client's own credentials (its Authorization or
-- X-Access-Token header, its ?token=), never the proxy's: so each checks the
-- key itself (the first that refuses it answers, 401 or 429) and lists what
-- that key's tenant may see — its own sessions, or all for an admin key.
--
-- SANDGATE_REPLICAS (set in the config's global section): "ID=HOST:PORT ...".

local replicas = {}
for entry in string.gmatch(os.getenv("SANDGATE_REPLICAS") or "", "%S+") do
    local id, addr = entry:match("^([^=]+)=(.+)$")
    if id then
        replicas[#replicas + 1] = { id = id, addr = addr }
    end
end

-- Up, as the replica's own backend's health check says.
local function up(id)
    local be = core.backends["replica_" .. id]
    local srv = be and be.servers[id]
    return srv ~= nil and srv:get_stats().status:sub(1, 2) == "UP"
end

local function answer(applet, status, body, ctype)
    applet:set_status(status)
    applet:add_header("content-type", ctype or "application/json")
    applet:add_header("content-length", tostring(#body))
    applet:start_response()
    applet:send(body)
end

local function fail(applet, status, kind, msg)
    answer(applet, status, string.format('{"error":"%s","message":"%s"}\n', kind, msg))
end

-- The credentials a client may send in headers (docs/api.md,
-- docs/jupyter.md); ?token= goes along with the query string.
local passed = { "authorization", "x-access-token", "e2b-traffic-access-token" }

core.register_service("sandgate_list", "http", function(applet)
    local headers = {}
    for _, name in ipairs(passed) do
        local v = applet.headers[name]
        if v and v[0] then
            headers[name] = { v[0] }
        end
    end
    local path = applet.path
    if applet.qs and applet.qs ~= "" then
        path = path .. "?" .. applet.qs
    end
    local parts, asked = {}, 0
    for _, r in ipairs(replicas) do
        if up(r.id) then
            asked = asked + 1
            local res = core.httpclient():get({ url = "http://" .. r.addr .. path,
                                                headers = headers, timeout = 10000 })
            if not res or not res.status or res.status == 0 then
                return fail(applet, 502, "unavailable",
                            "replica " .. r.id .. " did not answer for its part of the list")
            end
            if res.status ~= 200 then -- a wrong token, say: as the replica said it
                local ctype = res.headers and res.headers["content-type"] and
                              res.headers["content-type"][0]
                return answer(applet, res.status, res.body or "", ctype)
            end
            local items = (res.body or ""):match("^%s*%[(.*)%]%s*$")
            if items == nil then
                return fail(applet, 502, "unavailable",
                            "replica " .. r.id .. " answered a list that is not a JSON array")
            end
            if items:match("%S") then
                parts[#parts + 1] = items
            end
        end
    end
    if asked == 0 then
        return fail(applet, 503, "unavailable", "no sandgate replica is up")
    end
    answer(applet, 200, "[" .. table.concat(parts, ",") .. "]\n")
end)
