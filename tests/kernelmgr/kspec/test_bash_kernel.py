"""The Bash kernel (bash_kernel from PyPI, kernelspec bash: scripts/bash-kernel.sh)
in a gVisor sandbox: listed, started from the REST and Jupyter APIs, state kept
between calls, a failing command, a timeout that interrupts `sleep 1000` and a
shell loop (and spares a background job), and a paused Bash session resumed
intact.

bash_kernel runs bash on a pseudo-terminal, so what a command writes to
stderr comes back in stdout, and a cell whose last command fails is an error
whose name is empty and whose value is the exit status (no traceback)."""
from sgd import Daemon
from tap import ok, done


def run(d, cid, code, **kw):
    st, r = d.json("POST", "/execute", {"code": code, "context_id": cid, **kw},
                   headers={"Accept": "application/json"}, timeout=180)
    return r if st == 200 else {"status": st, "body": r}


d = Daemon("--pool-size", "0", "--pause-after", "0")
try:
    st, specs = d.json("GET", "/api/kernelspecs")
    bash = specs.get("kernelspecs", {}).get("bash", {})
    ok(st == 200 and bash.get("spec", {}).get("language") == "bash",
       "GET /api/kernelspecs lists bash, language bash", specs.get("kernelspecs", {}).keys())

    st, c = d.json("POST", "/contexts", {"language": "bash"})
    ok(st == 201 and c.get("language") == "bash", "POST /contexts {\"language\": \"bash\"}", (st, c))
    cid = c.get("id")
    r = run(d, cid, "x=42\ngreet() { echo \"hi $1\"; }\necho $x")
    ok(r.get("stdout") == "42\n" and r.get("error") is None, "Bash code runs: echo is stdout", r)
    r = run(d, cid, "greet $x")
    ok(r.get("stdout") == "hi 42\n", "variables and functions persist between calls", r)
    r = run(d, cid, "echo out; echo err >&2")
    ok(r.get("stdout") == "out\nerr\n" and r.get("stderr") == "",
       "stderr comes back in stdout, in order (bash runs on a terminal)", r)
    r = run(d, cid, "ls /nonexistent")
    err = r.get("error") or {}
    ok("No such file" in r.get("stdout", "") and err.get("name") == "" and err.get("value") == "2",
       "a failing command is an error: empty name, its exit status as value", r)
    r = run(d, cid, "true")
    ok(r.get("error") is None, "a command that succeeds after one that failed is no error", r)
    r = run(d, cid, "pwd; echo $HOME")
    ok(r.get("stdout") == "/home/user\n/home/user\n", "it runs in the session's workspace home", r)
    run(d, cid, "cd /tmp")
    r = run(d, cid, "pwd; cd")
    ok(r.get("stdout") == "/tmp\n", "cd carries over to the next cell", r)

    r = run(d, cid, "sleep 300 & bg=$!\necho started", timeout=60)
    ok(r.get("stdout", "").endswith("started\n"), "a background job starts", r)  # "[1] PID" first
    r = run(d, cid, "sleep 1000", timeout=5)
    err = r.get("error") or {}
    ok(err.get("name") == "TimeoutError" and "was interrupted" in err.get("value", ""),
       "a timeout interrupts `sleep 1000` (no restart)", r)
    r = run(d, cid, "while true; do :; done", timeout=5)
    err = r.get("error") or {}
    ok(err.get("name") == "TimeoutError" and "was interrupted" in err.get("value", ""),
       "a timeout interrupts a shell loop (no restart)", r)
    r = run(d, cid, "greet $x; kill -0 $bg && echo bg alive")
    ok(r.get("stdout") == "hi 42\nbg alive\n", "after the interrupts: state intact, background job alive", r)
    run(d, cid, "kill $bg; wait $bg")

    st, p = d.json("POST", f"/contexts/{cid}/pause", timeout=120)
    r = run(d, cid, "greet again; echo $((x * 10))")
    ok(st == 200 and p.get("state") == "paused" and r.get("stdout") == "hi again\n420\n",
       "a paused Bash session resumes with its variables and functions", (st, p, r))

    st, r = d.json("POST", "/execute", {"language": "bash", "code": "echo $BASH_VERSION"},
                   headers={"Accept": "application/json"}, timeout=180)
    ok(st == 200 and r.get("stdout", "").startswith("5."),
       "POST /execute {\"language\": \"bash\"} runs in a default Bash context", (st, r))

    st, k = d.json("POST", "/api/kernels", {"name": "bash"})
    st2, m = d.json("GET", f"/api/kernels/{k.get('id')}")
    ok(st == 201 and m.get("name") == "bash", "POST /api/kernels {\"name\": \"bash\"} starts one",
       (st, k, m))
finally:
    d.stop()
done()
