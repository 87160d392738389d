-- HAProxy Lua (docker/haproxy-config.sh loads it): GET /contexts,
-- GET /api/kernels, GET /api/sessions and E2B's GET /sandboxes and
-- /v2/sandboxes answered with the lists of every replica that is up,
-- joined — what one sandgate would list.  Each replica
-- is asked with the client's own credentials (its Authorization,
-- X-Access-Token or X-API-Key header, its ?token=), never the proxy's: so each checks the
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
local passed = { "authorization", "x-access-token", "e2b-traffic-access-token", "x-api-key" }

-- The client's credentials, to ask each replica with.
local function credentials(applet)
    local headers = {}
    for _, name in ipairs(passed) do
        local v = applet.headers[name]
        if v and v[0] then
            headers[name] = { v[0] }
        end
    end
    return headers
end

-- Asks every replica that is up for applet's path and query; calls
-- take(replica, response) with each 200 answer.  Returns nil when every
-- replica answered 200, or after answering the client itself (the first
-- replica that failed or refused, or no replica up).
local function ask_all(applet, take)
    local headers = credentials(applet)
    local path = applet.path
    if applet.qs and applet.qs ~= "" then
        path = path .. "?" .. applet.qs
    end
    local asked = 0
    for _, r in ipairs(replicas) do
        if up(r.id) then
            asked = asked + 1
            local res = core.httpclient():get({ url = "http://" .. r.addr .. path,
                                                headers = headers, timeout = 10000 })
            if not res or not res.status or res.status == 0 then
                fail(applet, 502, "unavailable",
                     "replica " .. r.id .. " did not answer for its part of the list")
                return false
            end
            if res.status ~= 200 then -- a wrong token, say: as the replica said it
                local ctype = res.headers and res.headers["content-type"] and
                              res.headers["content-type"][0]
                answer(applet, res.status, res.body or "", ctype)
                return false
            end
            if not take(r, res) then
                fail(applet, 502, "unavailable",
                     "replica " .. r.id .. " answered a list that is not a JSON array")
                return false
            end
        end
    end
    if asked == 0 then
        fail(applet, 503, "unavailable", "no sandgate replica is up")
        return false
    end
    return true
end

core.register_service("sandgate_list", "http", function(applet)
    local parts = {}
    local done = ask_all(applet, function(_, res)
        local items = (res.body or ""):match("^%s*%[(.*)%]%s*$")
        if items == nil then
            return false
        end
        if items:match("%S") then
            parts[#parts + 1] = items
        end
        return true
    end)
    if done then
        answer(applet, 200, "[" .. table.concat(parts, ",") .. "]\n")
    end
end)

-- The end of the JSON string that begins at text[i] (a '"').
local function string_end(text, i)
    local j = i + 1
    while j <= #text do
        local c = text:byte(j)
        if c == 92 then -- backslash: skip what it escapes
            j = j + 1
        elseif c == 34 then
            return j
        end
        j = j + 1
    end
    return #text
end

-- A JSON array's elements (objects), as text; nil when text is no array.
local function elements(text)
    if not text:match("^%s*%[") then
        return nil
    end
    local out, depth, start, i = {}, 0, nil, 1
    while i <= #text do
        local c = text:sub(i, i)
        if c == '"' then
            i = string_end(text, i)
        elseif c == "[" or c == "{" then
            depth = depth + 1
            if depth == 2 then
                start = i
            end
        elseif c == "]" or c == "}" then
            if depth == 2 then
                out[#out + 1] = text:sub(start, i)
            end
            depth = depth - 1
        end
        i = i + 1
    end
    return out
end

-- The string value of an object's own (not a nested object's) field.
local function field(obj, name)
    local depth, i = 0, 1
    while i <= #obj do
        local c = obj:sub(i, i)
        if c == '"' then
            local j = string_end(obj, i)
            if depth == 1 and obj:sub(i + 1, j - 1) == name then
                local v = obj:match('^%s*:%s*"([^"]*)"', j + 1)
                if v then
                    return v
                end
            end
            i = j
        elseif c == "{" or c == "[" then
            depth = depth + 1
        elseif c == "}" or c == "]" then
            depth = depth - 1
        end
        i = i + 1
    end
end

-- Milliseconds since 1970 of sandgate's ISO 8601 time (2026-11-28T12:00:00.123Z).
local function iso_ms(s)
    local y, mo, d, h, mi, sec, ms = (s or ""):match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.?(%d*)Z$")
    if not y then
        return 0
    end
    y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
    if mo <= 2 then
        y = y - 1
    end
    local era = y // 400
    local yoe = y - era * 400
    local doy = (153 * (mo > 2 and mo - 3 or mo + 9) + 2) // 5 + d - 1
    local days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000 + tonumber(sec) * 1000 +
           (ms ~= "" and tonumber(ms) or 0)
end

-- GET /v2/sandboxes and /sandboxes (E2B's lists): every replica is asked
-- the same query (filters, limit, nextToken: "START_MS.ID", the same on
-- every replica), and their pages are joined in the order the query asks
-- (newest first unless order=asc), cut to its limit, with the token of the
-- last one kept when there is more.
core.register_service("sandgate_e2b_list", "http", function(applet)
    local qs = "&" .. (applet.qs or "") .. "&"
    local limit = tonumber(qs:match("&limit=(%d+)&") or "") or
                  (applet.path == "/v2/sandboxes" and 100 or math.huge)
    local asc = qs:match("&order=asc&") ~= nil
    local items, more = {}, false
    local done = ask_all(applet, function(_, res)
        local list = elements(res.body or "")
        if list == nil then
            return false
        end
        for _, obj in ipairs(list) do
            items[#items + 1] = { obj = obj, ms = iso_ms(field(obj, "startedAt")),
                                  id = field(obj, "sandboxID") or "" }
        end
        local next = res.headers and res.headers["x-next-token"]
        more = more or (next ~= nil and next[0] ~= nil)
        return true
    end)
    if not done then
        return
    end
    table.sort(items, function(a, b)
        if a.ms ~= b.ms then
            return (a.ms < b.ms) == asc
        end
        return (a.id < b.id) == asc
    end)
    local out, token = {}, nil
    for i, it in ipairs(items) do
        if i > limit then
            break
        end
        out[#out + 1] = it.obj
        if i == limit and (more or #items > limit) then
            token = string.format("%d.%s", it.ms, it.id)
        end
    end
    local body = "[" .. table.concat(out, ",") .. "]\n"
    applet:set_status(200)
    applet:add_header("content-type", "application/json")
    applet:add_header("content-length", tostring(#body))
    if token then
        applet:add_header("x-next-token", token)
    end
    applet:start_response()
    applet:send(body)
end)

-- POST /sandboxes, /v2/sandboxes or /contexts whose body has volumeMounts:
-- sent to the replica that has the first volume it names (a volume lives
-- on the replica that made it, docs/api.md#volumes), found by asking each
-- replica's GET /volumes with the client's credentials; its answer is
-- relayed.  A name no replica has goes to the first replica up, which
-- answers 404 naming it.
core.register_service("sandgate_place", "http", function(applet)
    local body = applet:receive() or ""
    local want = tonumber(applet.headers["content-length"] and
                          applet.headers["content-length"][0] or "") or #body
    while #body < want do
        local more = applet:receive()
        if not more or more == "" then
            break
        end
        body = body .. more
    end
    local mounts = body:match('"volumeMounts"%s*:%s*(%b[])') or ""
    local name = mounts:match('"name"%s*:%s*"([^"]*)"')
    local headers = credentials(applet)
    local target
    for _, r in ipairs(replicas) do
        if up(r.id) then
            target = target or r
            local res = name and core.httpclient():get({ url = "http://" .. r.addr .. "/volumes",
                                                         headers = headers, timeout = 10000 })
            for _, obj in ipairs(res and res.status == 200 and elements(res.body or "") or {}) do
                if field(obj, "name") == name then
                    target = r
                    goto found
                end
            end
        end
    end
    ::found::
    if not target then
        fail(applet, 503, "unavailable", "no sandgate replica is up")
        return
    end
    headers["content-type"] = { "application/json" }
    local path = applet.path .. ((applet.qs and applet.qs ~= "") and ("?" .. applet.qs) or "")
    local res = core.httpclient():post({ url = "http://" .. target.addr .. path,
                                         headers = headers, body = body, timeout = 300000 })
    if not res or not res.status or res.status == 0 then
        fail(applet, 502, "unavailable", "replica " .. target.id .. " did not answer")
        return
    end
    local ctype = res.headers and res.headers["content-type"] and res.headers["content-type"][0]
    answer(applet, res.status, res.body or "", ctype)
end)

-- Contexts that moved away from the replica that made them (POST
-- /contexts/{id}/move, a drain): every 100 ms each replica's public GET
-- /cluster/routes lists the SHA-256 of the ids it holds that another
-- replica made ("here"), of those leaving it ("moving") and of those that
-- left lately, with where to ("moved"); a request naming one that is
-- somewhere goes there (the config's lua.sandgate_moved), never by its tag,
-- and one naming a context on its way waits (lua.sandgate_wait_move, 15 s
-- at most) until it has arrived.  The ids themselves are never listed.
-- Each replica is asked by a task of its own, so a slow one delays no
-- other.  What a replica said is kept until it answers again (one down
-- keeps its contexts: their requests get its 503, not another replica's
-- 404), and where two say otherwise the fresher wins ("here" over "moved"
-- unless 5 s older).  The proxy names itself (?poller=): a move waits
-- until every proxy asking has heard of it before it stops the context.
local moved, moving = {}, {}
local said = {}
local poller
do
    local now, seed = core.now(), 0
    for c in (os.getenv("HOSTNAME") or ""):gmatch(".") do
        seed = (seed * 31 + c:byte()) % 0x7fffffff
    end
    math.randomseed((seed + now.sec * 1000003 + now.usec) % 0x7fffffff)
    poller = string.format("%08x%08x", math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
end

local function now_ms()
    local t = core.now()
    return t.sec * 1000 + t.usec // 1000
end

local function redraw()
    local at, where, leaving = {}, {}, {}
    local fresh = now_ms() - 5000
    for id, s in pairs(said) do
        for h in pairs(s.here) do
            if not at[h] or s.at > at[h] then
                at[h], where[h] = s.at, id
            end
        end
        for h, to in pairs(s.moved) do
            if not at[h] or s.at - 5000 > at[h] then
                at[h], where[h] = s.at - 5000, to
            end
        end
        if s.at > fresh then
            for h in pairs(s.moving) do
                leaving[h] = id
            end
        end
    end
    moved, moving = where, leaving
end

local function ask(r)
    while true do
        if up(r.id) then
            local res = core.httpclient():get({
                url = "http://" .. r.addr .. "/cluster/routes?poller=" .. poller,
                timeout = 1000 })
            if res and res.status == 200 and res.body then
                local s = { here = {}, moving = {}, moved = {}, at = now_ms() }
                for h in (res.body:match('"here":%[(.-)%]') or ""):gmatch('"(%x+)"') do
                    s.here[h] = true
                end
                for h in (res.body:match('"moving":%[(.-)%]') or ""):gmatch('"(%x+)"') do
                    s.moving[h] = true
                end
                local m = res.body:match('"moved":(%b{})') or ""
                for h, to in m:gmatch('"(%x+)":"([A-Za-z0-9._-]+)"') do
                    s.moved[h] = to
                end
                said[r.id] = s
                redraw()
            end
        end
        core.msleep(100)
    end
end

for _, r in ipairs(replicas) do
    core.register_task(function() ask(r) end)
end

-- Where the id is: the replica it moved to, or the one it is leaving (a
-- request that waited its longest goes there).
core.register_converters("sandgate_moved", function(h)
    return moved[h] or moving[h] or ""
end)

-- Whether every replica that is up has answered once (a proxy just
-- started knows no route before).
local function heard_all()
    for _, r in ipairs(replicas) do
        if not said[r.id] and up(r.id) then
            return false
        end
    end
    return true
end

local started = now_ms()

core.register_action("sandgate_wait_move", { "http-req" }, function(txn)
    local h = txn:get_var("txn.idsha")
    local waited = 0
    while now_ms() - started < 3000 and not heard_all() do
        core.msleep(20)
    end
    while h and moving[h] and not moved[h] and waited < 15000 do
        core.msleep(20)
        waited = waited + 20
    end
end)
