"""MCP over Streamable HTTP by hand: JSON-RPC posts to a sandgate's /mcp."""
import json

JSON_AND_SSE = "application/json, text/event-stream"


def post(d, body, session=None, headers=None, raw=None, accept=JSON_AND_SSE):
    """POSTs to /mcp; returns (status, headers, answer): the JSON document,
    or the list of messages of an event stream."""
    h = {"Accept": accept} if accept else {}
    if session:
        h["Mcp-Session-Id"] = session
    h.update(headers or {})
    status, hdrs, data = d.request("POST", "/mcp", body, headers=h, raw=raw)
    text = data.decode()
    if (hdrs.get("Content-Type") or "").startswith("text/event-stream"):
        answer = [json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:")]
    else:
        answer = json.loads(text) if text.strip() else None
    return status, hdrs, answer


def initialize(d, version="2025-11-25"):
    status, hdrs, answer = post(d, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                    "params": {"protocolVersion": version, "capabilities": {},
                                               "clientInfo": {"name": "raw", "version": "0"}}})
    sid = hdrs.get("Mcp-Session-Id")
    post(d, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=sid)
    return status, sid, answer


def call(d, sid, name, args, rid=1, accept="application/json"):
    status, _, answer = post(d, {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                 "params": {"name": name, "arguments": args}},
                             session=sid, accept=accept)
    return status, answer


def text_of(answer):
    return "".join(c.get("text", "") for c in answer["result"]["content"] if c["type"] == "text")


def err_code(answer):
    return (answer or {}).get("error", {}).get("code")
