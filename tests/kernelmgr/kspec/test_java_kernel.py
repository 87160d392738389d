"""The Java kernel (JJava from PyPI on Debian's OpenJDK, kernelspec java:
scripts/java-kernel.sh) in a gVisor sandbox: listed, output and results,
state kept between calls, compile and runtime errors, env_vars as system
properties (as E2B's Java has them) put back after the call, the cwd as
user.dir, an E2B sandbox's envs, a timeout that stops an endless loop with
the session kept, and a paused Java session resumed intact."""
import json

from sgd import Daemon, TOKEN
from tap import ok, done


def run(d, cid, code, **kw):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid, **kw},
                   headers={"Accept": "application/json"}, timeout=180)
    return r if st == 200 else {"status": st, "body": r}


def text(r):
    return [x.get("text") for x in r.get("results") or []]


d = Daemon("--pool-size", "0", "--pause-after", "0")
try:
    st, specs = d.json("GET", "/api/kernelspecs")
    java = specs.get("kernelspecs", {}).get("java", {})
    ok(st == 200 and java.get("spec", {}).get("language") == "java",
       "GET /api/kernelspecs lists java, language java", specs.get("kernelspecs", {}).keys())

    st, c = d.json("POST", "/contexts", {"language": "java"})
    cid = c.get("id")
    r = run(d, cid, 'System.out.println("Hello, World!")')
    ok(st == 201 and r.get("stdout") == "Hello, World!\n" and r.get("error") is None,
       "a Java context runs System.out.println", (st, c, r))
    run(d, cid, "int x = 41;\nString greet(String who) { return \"hi \" + who; }")
    r = run(d, cid, "greet(\"x\") + (x + 1)")
    ok(text(r) == ["hi x42"], "variables and methods persist; an expression is the result", r)
    r = run(d, cid, "undefinedThing()")
    ok((r.get("error") or {}).get("name") == "CompilationException",
       "a compile error is an error", r)
    r = run(d, cid, 'throw new IllegalStateException("boom")')
    err = r.get("error") or {}
    ok("IllegalStateException" in err.get("value", "") and "boom" in err.get("value", ""),
       "an exception is an error naming its class and message (JJava's name is "
       "RuntimeException for all)", r)

    r = run(d, cid, 'System.getProperty("user.dir")')
    ok(text(r) == ["/home/user"], "user.dir is the context's cwd", r)
    value = "a\"b\\c\nd'e \u00e9"
    r = run(d, cid, 'System.getProperty("Q").equals(' + json.dumps(value) + ') + " " + '
            'System.getProperty("R")', env_vars={"Q": value, "R": "r"})
    after = run(d, cid, 'System.getProperty("Q", "unset") + " " + System.getProperty("R", "-")')
    ok(text(r) == ["true r"] and text(after) == ["unset -"],
       "env_vars are system properties for the call (quotes, backslashes, newlines "
       "intact), gone after it", (r, after))

    st, c2 = d.json("POST", "/contexts", {"language": "java", "cwd": "/tmp"})
    r = run(d, c2.get("id"), 'System.getProperty("user.dir")')
    ok(text(r) == ["/tmp"], "a context made with cwd /tmp: user.dir is /tmp (as E2B's)", r)
    d.json("DELETE", f"/contexts/{c2.get('id')}")

    # An E2B sandbox's envs: properties of its Java contexts too.
    st, _, body = d.request("POST", "/sandboxes",
                            {"templateID": "base", "envVars": {"TEST_ENV_VAR": "supertest"}},
                            headers={"X-API-Key": TOKEN}, token=None)
    sid = json.loads(body).get("sandboxID") if st == 201 else None
    st2, _, out = d.request("POST", "/execute",
                            {"code": 'System.getProperty("TEST_ENV_VAR")', "language": "java"},
                            headers={"E2b-Sandbox-Id": sid or "", "Accept": "application/json"})
    r = json.loads(out) if st2 == 200 else {}
    ok(st == 201 and text(r) == ["supertest"],
       "an E2B sandbox's envVars: System.getProperty in its Java context", (st, st2, out[:300]))
    if sid:
        d.request("DELETE", f"/sandboxes/{sid}", headers={"X-API-Key": TOKEN}, token=None)

    run(d, cid, "long spins = 0;")
    r = run(d, cid, "while (true) { spins++; }", timeout=3)
    again = run(d, cid, "x + \" \" + (spins > 0)")
    ok(r.get("error") is not None and text(again) == ["41 true"],
       "a timeout stops an endless loop; the session and its variables remain", (r, again))

    st, _ = d.json("POST", f"/contexts/{cid}/pause")
    st2, c3 = d.json("GET", f"/contexts/{cid}")
    r = run(d, cid, "greet(\"again\") + x")
    ok(st == 200 and c3.get("state") == "paused" and text(r) and
       text(r)[0].startswith("hi again"), "a paused Java session resumes with its state",
       (st, c3, r))
finally:
    d.stop()
done()
