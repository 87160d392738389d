-- The egress proxy's decisions (proxy.c writes the HAProxy configuration
-- that loads this).  A sandbox whose rules name hosts or set headers has
-- its TCP to ports 80 and 443 redirected here; HAProxy knows it by its
-- source address.
--
-- sg_check decides a connection from the name it asks for (TLS: the
-- ClientHello's SNI; HTTP: the Host header) and where it was going:
--   "name"   the name is in allowOut: HAProxy resolves it with the
--            sandboxes' DNS servers and connects there, whatever address
--            the sandbox chose;
--   "ip"     no name rule says anything: the original destination, if the
--            sandbox's address rules allow it;
--   "refuse" a denyOut entry (a name, or an address range) covers it.
-- allowOut wins over denyOut, as in E2B.  The operator's policy applies to
-- every connection the proxy makes (nftables, by the proxy's uid).
--
-- sg_rules (a unix socket only root opens) takes a sandbox's rules:
--   POST: "SRC\nallow ENTRY...\ndeny ENTRY...\n", "limit ENTRY...\n" (the
--         tenant's: what the sandbox reaches at most) and "header HOST\tNAME\tVALUE\n"
--         lines, the headers a rule sets (secrets' values in them: they
--         live in this process's memory only); nothing: forgotten
--   GET:  "SRC RULE COUNT" per line, the refusals counted per rule
--         ("denyOut ENTRY", "unresolved allowOut ENTRY").

local rules = {} -- source address -> {allow = {names, nets}, deny = {...}, headers}
local refused = {} -- "SRC RULE" -> count

local function ip4(s)
  local a, b, c, d = (s or ""):match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not a then
    return nil
  end
  return ((tonumber(a) * 256 + tonumber(b)) * 256 + tonumber(c)) * 256 + tonumber(d)
end

local function entries(list)
  local t = {names = {}, nets = {}}
  for w in (list or ""):gmatch("%S+") do
    local addr, len = w:match("^([%d.]+)/(%d+)$")
    local a = ip4(addr or w)
    if a then
      local bits = tonumber(len or 32)
      local mask = bits == 0 and 0 or (0xffffffff << (32 - bits)) & 0xffffffff
      t.nets[#t.nets + 1] = {net = a & mask, mask = mask, rule = w}
    else
      t.names[#t.names + 1] = w:lower()
    end
  end
  return t
end

local function name_rule(names, name)
  for _, p in ipairs(names) do
    if p == name or (p:sub(1, 2) == "*." and #name > #p - 1 and name:sub(-(#p - 1)) == p:sub(2)) then
      return p
    end
  end
end

local function net_rule(nets, a)
  for _, n in ipairs(a and nets or {}) do
    if a & n.mask == n.net then
      return n.rule
    end
  end
end

local function count(src, rule)
  local k = src .. " " .. rule
  refused[k] = (refused[k] or 0) + 1
end

core.register_action("sg_check", {"tcp-req", "http-req"}, function(txn, how)
  local src = txn.f:src()
  local r = rules[src]
  if not r then -- not a sandbox whose rules name hosts: nothing to do here
    txn:set_var("txn.sg_rule", "(not a sandbox this proxy serves)")
    txn:set_var("txn.sg_verdict", "refuse")
    return
  end
  local name
  if how == "tls" then
    name = txn.f:req_ssl_sni()
  else
    name = txn.f:req_hdr("host")
  end
  name = (name or ""):lower():gsub(":%d+$", ""):gsub("%.$", "")
  local dst = ip4(txn.f:dst())
  txn:set_var("txn.sg_name", name)
  -- The headers of the rules for this name: set on an HTTP request, or
  -- (TLS) the connection is opened to set them (txn.sg_open: the frontend
  -- "opened", sg_headers).
  local transforms = {}
  for _, h in ipairs(name ~= "" and r.headers or {}) do
    if name_rule({h.host}, name) then
      transforms[#transforms + 1] = h
    end
  end
  local rule = name ~= "" and name_rule(r.allow.names, name)
  local verdict
  if rule then
    txn:set_var("txn.sg_rule", "allowOut " .. rule)
    verdict = "name"
  else
    rule = name ~= "" and name_rule(r.deny.names, name)
    if not rule and not net_rule(r.allow.nets, dst) then
      rule = net_rule(r.deny.nets, dst)
    end
    if rule then
      count(src, "denyOut " .. rule)
      txn:set_var("txn.sg_rule", "denyOut " .. rule)
      txn:set_var("txn.sg_verdict", "refuse")
      return
    end
    verdict = "ip"
  end
  -- The tenant's limit, when it has one: a name it allows goes where the
  -- name resolves (never to an address the sandbox chose with it); an
  -- address, only when the limit holds it.
  if r.limit then
    local within = name ~= "" and name_rule(r.limit.names, name)
    if within then
      if verdict == "ip" then
        txn:set_var("txn.sg_rule", "the tenant's limit " .. within)
      end
      verdict = "name"
    elseif verdict == "name" or not net_rule(r.limit.nets, dst) then
      count(src, "tenant limit")
      txn:set_var("txn.sg_rule", "the tenant's limit")
      txn:set_var("txn.sg_verdict", "refuse")
      return
    end
  end
  if #transforms > 0 and how == "http" then
    for _, h in ipairs(transforms) do
      txn.http:req_set_header(h.name, h.value)
    end
  end
  if #transforms > 0 and how == "tls" then
    txn:set_var("txn.sg_open", "1")
  end
  txn:set_var("txn.sg_verdict", verdict)
end, 1)

-- The same for a request inside a TLS connection the proxy opened
-- (txn.sg_open): the headers of the rules for its SNI.
core.register_action("sg_headers", {"http-req"}, function(txn)
  local r = rules[txn.f:src()]
  local name = (txn.f:ssl_fc_sni() or ""):lower()
  for _, h in ipairs(r and name ~= "" and r.headers or {}) do
    if name_rule({h.host}, name) then
      txn.http:req_set_header(h.name, h.value)
    end
  end
end, 0)

-- A name allowed but not resolved: counted under the rule that allowed it
-- (rules are the sandbox's own, checked entries; names are what its code
-- sent).
core.register_action("sg_unresolved", {"tcp-req", "http-req"}, function(txn)
  count(txn.f:src(), "unresolved " .. (txn:get_var("txn.sg_rule") or "allowOut ?"))
end, 0)

core.register_service("sg_rules", "http", function(applet)
  if applet.method == "GET" then
    local out = {}
    for k, n in pairs(refused) do
      out[#out + 1] = k .. " " .. n .. "\n"
    end
    local body = table.concat(out)
    applet:set_status(200)
    applet:add_header("content-length", tostring(#body))
    applet:start_response()
    applet:send(body)
    return
  end
  local body = applet:receive() or ""
  local src = body:match("^(%S+)\n")
  local allow = body:match("\nallow ([^\n]*)") or ""
  local deny = body:match("\ndeny ([^\n]*)") or ""
  local limit = body:match("\nlimit ([^\n]*)")
  local headers = {}
  for host, name, value in body:gmatch("\nheader ([^\t\n]+)\t([^\t\n]+)\t([^\n]*)") do
    headers[#headers + 1] = {host = host:lower(), name = name, value = value}
  end
  if not ip4(src) then
    applet:set_status(400)
  elseif allow:match("%S") or deny:match("%S") or #headers > 0 or limit then
    rules[src] = {allow = entries(allow), deny = entries(deny), headers = headers,
                  limit = limit and entries(limit)}
    applet:set_status(204)
  else
    rules[src] = nil
    for k in pairs(refused) do
      if k:sub(1, #src + 1) == src .. " " then
        refused[k] = nil
      end
    end
    applet:set_status(204)
  end
  applet:add_header("content-length", "0")
  applet:start_response()
end)
