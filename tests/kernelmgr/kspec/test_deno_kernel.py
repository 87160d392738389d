"""JavaScript and TypeScript: Deno's Jupyter kernel (kernelspec deno,
scripts/deno.sh) in a gVisor sandbox.  Listed and started from the REST and
Jupyter APIs under every name clients use (js, javascript, ts, typescript);
state kept between calls (a variable, a function, a module file of the
workspace imported); errors with their stack; rich results (HTML, PNG); a
TypeScript typed function; stdout streamed in order; a timeout that
interrupts a busy loop (state kept) and restarts a kernel the interrupt
does not stop; no network; pause and resume with V8's heap intact; a paused
session re-adopted by a restarted sandgate; a warm pool of Deno kernels
(--pool-size javascript=1) and a pool name that is no language refused;
and the same kernel without a sandbox (--sandbox none).

Deno's kernel speaks ZeroMQ over TCP only: sandgate-preload.so gives it Unix
sockets (kernelmgr/guest/preload.c), which is what lets runsc checkpoint
it, and the test checks that the sandbox holds no TCP socket."""
import json
import subprocess
import tempfile
import time

from sgd import Daemon, SANDGATE
from tap import ok, done

# A 1x1 PNG.
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
       "AAAABJRU5ErkJggg==")


def run(d, cid, code, **kw):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid, **kw},
                   headers={"Accept": "application/json"}, timeout=180)
    return r if st == 200 else {"status": st, "body": r}


def text(r):
    res = [x for x in r.get("results", []) if x.get("is_main_result")]
    return res[0].get("text") if res else None


def check_language(d, cid, lang):
    r = run(d, cid, "let n = 40\nfunction twice(x) { return x * 2 }\nconsole.log('n is', n)")
    ok(r.get("stdout") == "n is 40\n" and r.get("error") is None, f"{lang}: console.log is stdout", r)
    r = run(d, cid, "twice(n) + 2")
    ok(text(r) == "82", f"{lang}: variables and functions persist between calls; the last "
       "value is the result", r)
    r = run(d, cid, "Deno.writeTextFileSync('shapes.ts', 'export const sides = 4;\\n"
                    "export function area(w: number, h: number): number { return w * h }\\n')\n"
                    "const shapes = await import('file:///home/user/shapes.ts')\n"
                    "shapes.area(shapes.sides, 5)")
    ok(text(r) == "20", f"{lang}: a module file of the workspace is imported (await import)", r)
    r = run(d, cid, "shapes.sides * 10")
    ok(text(r) == "40", f"{lang}: and the import persists", r)
    r = run(d, cid, "function inner() { throw new TypeError('bad shape') }\n"
                    "function outer() { inner() }\nouter()")
    err = r.get("error") or {}
    ok(err.get("name") == "TypeError" and err.get("value") == "bad shape"
       and "at inner" in err.get("traceback", "") and "at outer" in err.get("traceback", ""),
       f"{lang}: an error is structured: name, value and its stack as traceback", r)
    r = run(d, cid, "Deno.jupyter.html`<b>bold</b> ${n}`")
    res = (r.get("results") or [{}])[0]
    ok(res.get("html") == "<b>bold</b> 40", f"{lang}: Deno.jupyter.html is an HTML result", r)
    r = run(d, cid, f"Deno.jupyter.display({{'image/png': '{PNG}'}}, {{raw: true}})")
    res = (r.get("results") or [{}])[0]
    ok(res.get("png") == PNG and not res.get("is_main_result"),
       f"{lang}: Deno.jupyter.display of image/png is a PNG display", r)


d = Daemon("--pool-size", "0", "--pause-after", "0")
try:
    st, specs = d.json("GET", "/api/kernelspecs")
    deno = specs.get("kernelspecs", {}).get("deno", {}).get("spec", {})
    ok(st == 200 and deno.get("language") == "typescript" and deno.get("interrupt_mode") == "message",
       "GET /api/kernelspecs lists deno: language typescript, interrupts by message", deno)

    st, c = d.json("POST", "/contexts", {"language": "js"})
    ok(st == 201 and c.get("language") == "javascript",
       "POST /contexts {\"language\": \"js\"} is a javascript context", (st, c))
    cid = c.get("id")
    check_language(d, cid, "javascript")

    # No TCP socket in the sandbox: the kernel's ports are Unix sockets.
    r = run(d, cid, "Deno.readTextFileSync('/proc/net/tcp').trim().split('\\n').length - 1")
    ok(text(r) == "0", "the kernel holds no TCP socket in its sandbox (its ports are Unix sockets)",
       r)
    r = run(d, cid, "await Deno.connect({hostname: '198.51.100.1', port: 80})"
                    ".then(() => 'connected', e => e.message)")
    ok(any(w in (text(r) or "").lower() for w in ("unreachable", "no route to host")),
       "no network: a connection out fails at once (no route)", r)

    # Streaming: stdout arrives as it is written, in order.
    st, _, body = d.request("POST", "/execute", {
        "context_id": cid, "code": "for (let i = 0; i < 3; i++) { console.log('line', i); "
                                   "await new Promise(r => setTimeout(r, 300)) }"})
    lines = [json.loads(x) for x in body.decode().splitlines() if x.strip()]
    outs = [x["text"] for x in lines if x.get("type") == "stdout"]
    ok(st == 200 and "".join(outs) == "line 0\nline 1\nline 2\n" and len(outs) == 3,
       "stdout is streamed line by line, in order (NDJSON)", lines)

    st, t = d.json("POST", "/contexts", {"language": "typescript"})
    tid = t.get("id")
    r = run(d, tid, "interface Box { w: number; h: number }\n"
                    "function area(b: Box): number { return b.w * b.h }\narea({w: 6, h: 7})")
    ok(st == 201 and t.get("language") == "typescript" and text(r) == "42",
       "a TypeScript context runs a typed function", (t, r))
    r = run(d, tid, "typeof n")
    ok(text(r) == '"undefined"', "each context has its own kernel (no state from the JS one)", r)
    check_language(d, tid, "typescript")  # JavaScript is TypeScript

    # Timeouts: a busy loop is interrupted and the state stays; code the
    # interrupt cannot stop (a promise that never settles) restarts the kernel.
    t0 = time.time()
    r = run(d, cid, "while (true) {}", timeout=3)
    err = r.get("error") or {}
    ok(err.get("name") == "TimeoutError" and "was interrupted" in err.get("value", ""),
       "a timeout interrupts `while (true) {}`", r)
    r = run(d, cid, "twice(n)")
    ok(text(r) == "80", "and the state is intact after the interrupt", r)
    r = run(d, tid, "globalThis.kept = 1; await new Promise(() => {})", timeout=3)
    err = r.get("error") or {}
    ok(err.get("name") == "TimeoutError" and "restarted" in err.get("value", ""),
       "a timeout the interrupt does not end restarts the kernel (a promise that never settles)",
       r)
    r = run(d, tid, "typeof kept")
    ok(text(r) == '"undefined"', "the restarted kernel answers, its variables lost", r)

    # Pause and resume: V8's heap inside runsc's checkpoint.
    run(d, cid, "const big = Array.from({length: 100000}, (_, i) => i)")
    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    r = run(d, cid, "twice(n) + big[99999] + shapes.sides")
    ok(st == 200 and p.get("state") == "paused" and text(r) == str(80 + 99999 + 4),
       "a paused JavaScript session resumes with its variables, functions and imports",
       (st, p, r))

    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    d.restart()
    st, lst = d.json("GET", "/contexts")
    ok(any(x["id"] == cid and x["state"] == "paused" and x["language"] == "javascript"
           for x in lst), "a restarted sandgate re-adopts the paused JavaScript session", lst)
    r = run(d, cid, "twice(big[1])")
    ok(text(r) == "2", "and it resumes with its state", r)

    st, r = d.json("POST", "/execute", {"language": "ts", "code": "const s: string = 'ts'; s"},
                   headers={"Accept": "application/json"}, timeout=180)
    ok(st == 200 and text(r) == '"ts"', "POST /execute {\"language\": \"ts\"} runs in a default "
       "TypeScript context", (st, r))

    st, k = d.json("POST", "/api/kernels", {"name": "deno"})
    st2, m = d.json("GET", f"/api/kernels/{k.get('id')}")
    ok(st == 201 and m.get("name") == "deno", "POST /api/kernels {\"name\": \"deno\"} starts one",
       (st, k, m))
finally:
    d.stop()

# A warm pool per language: --pool-size javascript=1 keeps a Deno kernel
# ready (no preload code), which a JavaScript context claims.
d = Daemon("--pool-size", "0", "--pool-size", "javascript=1")
try:
    deadline = time.time() + 120
    while time.time() < deadline and 'sandgate_pool_kernels{state="ready"} 1' not in d.request(
            "GET", "/metrics")[2].decode():
        time.sleep(0.5)
    st, c = d.json("POST", "/contexts", {"language": "ts"})
    r = run(d, c.get("id"), "const z: number = 2; z + 1")
    claims = d.request("GET", "/metrics")[2].decode()
    ok(st == 201 and text(r) == "3" and "sandgate_pool_claims_total 1\n" in claims,
       "--pool-size javascript=1: a TypeScript context is claimed from the Deno pool",
       (st, r, d.log[-5:]))
    st, c = d.json("POST", "/contexts", {"language": "python"})
    r = run(d, c.get("id"), "1 + 1")
    claims = d.request("GET", "/metrics")[2].decode()
    ok(text(r) == "2" and "sandgate_pool_claims_total 1\n" in claims,
       "a Python context is not (the Python pool is 0)", (r, d.log[-5:]))
finally:
    d.stop()
with tempfile.TemporaryDirectory(prefix="sg-deno-") as state:
    proc = subprocess.run([SANDGATE, "--sandbox", "none", "--listen", "127.0.0.1:0",
                           "--no-auth", "--state-dir", state, "--pool-size", "cobol=1"],
                          capture_output=True, text=True, timeout=60)
ok(proc.returncode != 0 and "no template, kernelspec or language 'cobol'" in proc.stderr,
   "--pool-size cobol=1 is refused at start: no template, kernelspec or language", proc.stderr)

# Without a sandbox the same kernel runs as a plain process, its ports
# Unix sockets in the state directory.
d = Daemon("--sandbox", "none", "--pool-size", "0")
try:
    st, c = d.json("POST", "/contexts", {"language": "javascript"})
    r = run(d, c.get("id"), "let v = 6; v * 7")
    ok(st == 201 and text(r) == "42", "--sandbox none: a JavaScript context runs", (st, r))
    r = run(d, c.get("id"), "v + 1")
    ok(text(r) == "7", "--sandbox none: and keeps its state", r)
finally:
    d.stop()
done()
