"""The Python E2B SDK's files.* and commands.* (E2B's envd protocol) against
sandgate: the checks tests/lib/e2b_envd.mjs makes with the JS SDK.  Run
by tests/.venv-e2b's python.
usage: e2b_envd.py URL KEY [OTHER_TENANTS_KEY]
  — prints one JSON line per check: {ok, name, detail}"""
import hashlib
import sys
import time
import traceback

from e2b import CommandExitException, ConnectionConfig
from e2b.exceptions import NotFoundException, TimeoutException
from e2b.envd.versions import ENVD_DEBUG_FALLBACK
from e2b_code_interpreter import Sandbox
from checks import check, fails

url, key = sys.argv[1:3]
other_key = sys.argv[3] if len(sys.argv) > 3 else None




def open_sandbox(k, sandbox_id="default"):
    """The SDK takes its envd token from E2B's API, which debug mode skips; its
    constructor takes it directly (sandbox_id: a context's id, or 'default')."""
    headers = {"X-Access-Token": k, "E2b-Sandbox-Id": sandbox_id}
    return Sandbox(sandbox_id=sandbox_id, sandbox_domain=None, envd_version=ENVD_DEBUG_FALLBACK,
                   envd_access_token=k, traffic_access_token=k,
                   connection_config=ConnectionConfig(debug=True, sandbox_url=url,
                                                      extra_sandbox_headers=headers))


def gone(sbx, pred):
    """Whether no command pred picks is listed, within 10 s (a kill is
    asynchronous)."""
    for _ in range(100):
        if not any(pred(p) for p in sbx.commands.list()):
            return True
        time.sleep(0.1)
    return False


def not_found(e):
    return isinstance(e, NotFoundException) or "not found" in str(e).lower()


def files(sbx):
    info = sbx.files.write("/tmp/a.csv", "x,y\n1,2\n")
    check(info.path == "/tmp/a.csv" and info.name == "a.csv", "files.write (text)", info)
    ex = sbx.run_code("open('/tmp/a.csv').read()")
    check(ex.results and ex.results[0].text == "x,y\\n1,2\\n",
          "run_code without a context sees the file", ex)
    check(sbx.files.read("/tmp/a.csv") == "x,y\n1,2\n", "files.read (text)")
    data = bytes((i * 7) & 255 for i in range(65536))
    sbx.files.write("/tmp/bin.dat", data)
    check(sbx.files.read("/tmp/bin.dat", format="bytes") == data,
          "files.write and files.read (bytes): every byte intact")
    # gzip on the wire: 8 MiB that compress to little (inflated under backpressure)
    squeezed = b"".join(i.to_bytes(4, "big") * 1024 for i in range(2048))
    sbx.files.write("/tmp/gz.dat", squeezed, gzip=True)
    check(sbx.files.read("/tmp/gz.dat", format="bytes", gzip=True) == squeezed,
          "files.write(gzip=True) and read(gzip=True): every byte intact")
    big = b"".join(i.to_bytes(4, "big") + bytes(4092) for i in range(768))  # 3 MiB
    sbx.files.write("/tmp/big.dat", big)
    got = b"".join(sbx.files.read("/tmp/big.dat", format="stream"))
    check(hashlib.sha256(got).digest() == hashlib.sha256(big).digest(),
          "files.read (stream): 3 MiB intact", len(got))
    many = sbx.files.write_files([{"path": "/tmp/m/1.txt", "data": "one"},
                                  {"path": "/tmp/m/2.txt", "data": b"two"}])
    check([f.path for f in many] == ["/tmp/m/1.txt", "/tmp/m/2.txt"],
          "files.write_files (several at once)", many)
    check(sbx.files.read("/tmp/m/2.txt") == "two", "each is written")
    entries = sbx.files.list("/tmp/m")
    check([(e.name, e.type.value) for e in entries] == [("1.txt", "file"), ("2.txt", "file")],
          "files.list", entries)
    check(sbx.files.exists("/tmp/a.csv") is True, "files.exists: true")
    check(sbx.files.exists("/tmp/nope") is False, "files.exists: false")
    st = sbx.files.get_info("/tmp/a.csv")
    check(st.size == 8 and st.type.value == "file" and st.path == "/tmp/a.csv" and
          st.modified_time is not None, "files.get_info", st)
    sbx.commands.run("ln -s a.csv /tmp/link.csv && ln -s /usr/lib /tmp/lib && ln -s gone /tmp/x")
    got = [(i.type.value, i.symlink_target) for i in
           (sbx.files.get_info(p) for p in ("/tmp/link.csv", "/tmp/lib", "/tmp/x"))]
    check(got == [("file", "/tmp/a.csv"), ("dir", "/usr/lib"), ("symlink", "gone")],
          "files.get_info of a link: the type and whole path of what it leads to", got)
    sbx.commands.run("rm /tmp/link.csv /tmp/lib /tmp/x")
    boot = sbx.files.read("/proc/sys/kernel/random/boot_id")
    check(len(boot.strip()) == 36 and boot == sbx.commands.run(
        "cat /proc/sys/kernel/random/boot_id").stdout,
        "files.read of a /proc file (its size says 0): its text", boot)
    check(sbx.files.make_dir("/tmp/d/e") is True, "files.make_dir creates (and its parents)")
    check(sbx.files.make_dir("/tmp/d/e") is False, "files.make_dir: False when it exists")
    moved = sbx.files.rename("/tmp/a.csv", "/tmp/d/b.csv")
    check(moved.path == "/tmp/d/b.csv" and not sbx.files.exists("/tmp/a.csv") and
          sbx.files.read("/tmp/d/b.csv") == "x,y\n1,2\n", "files.rename", moved)
    sbx.files.remove("/tmp/d")
    check(sbx.files.exists("/tmp/d") is False, "files.remove (a directory with a file)")
    e = fails(sbx.files.remove, "/tmp/d")
    check(e is None, "files.remove of what is gone already succeeds, as E2B's envd", e)
    e = fails(sbx.files.read, "/tmp/nope")
    check(e is not None and not_found(e), "files.read of a missing file: not found", e)
    sbx.files.write("rel.txt", "relative")
    ex = sbx.run_code("open('/home/user/rel.txt').read()")
    check(ex.results and ex.results[0].text == "relative", "a relative path is /home/user's", ex)
    handle = sbx.files.watch_dir("/tmp")
    sbx.files.write("/tmp/watched.txt", "w")
    names = [ev.name for ev in handle.get_new_events()]
    handle.stop()
    check("watched.txt" in names, "files.watch_dir: a write is seen", names)


def commands(sbx):
    out, err = [], []
    e = fails(sbx.commands.run, "echo hi; echo err >&2; exit 3", on_stdout=out.append,
              on_stderr=err.append)
    check(isinstance(e, CommandExitException) and e.exit_code == 3 and e.stdout == "hi\n" and
          e.stderr == "err\n", "commands.run: a non-zero exit raises with its code and output", e)
    check("".join(out) == "hi\n" and "".join(err) == "err\n", "on_stdout and on_stderr", (out, err))
    r = sbx.commands.run("echo ok")
    check(r.exit_code == 0 and r.stdout == "ok\n", "commands.run: exit code 0 and stdout", r)
    r = sbx.commands.run("pwd", cwd="/tmp")
    check(r.stdout == "/tmp\n", "commands.run with cwd", r)
    r = sbx.commands.run('echo "$SG_A $SG_B"', envs={"SG_A": "one", "SG_B": "two words"})
    check(r.stdout == "one two words\n", "commands.run with envs", r)
    e = fails(sbx.commands.run, "sleep 30; echo late", timeout=2)
    check(isinstance(e, TimeoutException), "commands.run past its timeout raises TimeoutException", e)
    check(gone(sbx, lambda p: "echo late" in " ".join(p.args)), "the timed-out command was killed")
    bg = sbx.commands.run("sleep 1; echo done", background=True)
    r = bg.wait()
    check(bg.pid > 0 and r.exit_code == 0 and r.stdout == "done\n",
          "background: .wait() gives its result", r)
    long = sbx.commands.run("sleep 120", background=True, timeout=0)
    mine = [p for p in sbx.commands.list() if p.pid == long.pid]
    check(mine and mine[0].cmd == "/bin/bash" and "sleep 120" in mine[0].args,
          "commands.list has the background command", mine)
    probe = sbx.commands.run(f"kill -0 {long.pid} && ps -o pgid= -p {long.pid}")
    check(probe.stdout.strip() == str(long.pid),
          "its pid is its process's inside the sandbox, the leader of its group", probe)
    check(long.kill() is True, "background: .kill()")
    e = fails(long.wait)
    check(isinstance(e, CommandExitException) and e.exit_code != 0,
          "a killed command ends with a non-zero exit", e)
    check(gone(sbx, lambda p: p.pid == long.pid), "it is no longer listed")
    other = sbx.commands.run("sleep 120", background=True, timeout=0)
    check(sbx.commands.kill(other.pid) is True, "commands.kill(pid)")
    fails(other.wait)
    check(sbx.commands.kill(other.pid) is False, "commands.kill of an ended command: False")
    e = fails(sbx.commands.run, f"kill -0 {other.pid}")
    check(isinstance(e, CommandExitException), "... and its pid is gone from the sandbox", e)
    reader = sbx.commands.run('read line; echo "got:$line"', background=True, stdin=True)
    sbx.commands.send_stdin(reader.pid, "hello\n")
    r = reader.wait()
    check(r.stdout == "got:hello\n", "commands.send_stdin", r)
    cat = sbx.commands.run("cat", background=True, stdin=True, timeout=0)
    sbx.commands.send_stdin(cat.pid, "to cat")
    sbx.commands.close_stdin(cat.pid)
    r = cat.wait()
    check(r.stdout == "to cat", "commands.close_stdin: the command reads its end", r)
    later = sbx.commands.run('read go; echo "later:$go"', background=True, stdin=True, timeout=0)
    again = sbx.commands.connect(later.pid)
    later.disconnect()
    sbx.commands.send_stdin(later.pid, "now\n")
    r = again.wait()
    check(r.stdout == "later:now\n",
          "commands.connect: a second handle gets the output; disconnect() leaves the command "
          "running", r)


def contexts_and_keys(sbx):
    ctx = sbx.create_code_context()
    named = open_sandbox(key, ctx.id)
    named.files.write("/tmp/ctx.txt", "in the context")
    ex = sbx.run_code("open('/tmp/ctx.txt').read()", context=ctx)
    check(ex.results and ex.results[0].text == "in the context",
          "a sandbox id that is a context's id reaches its sandbox", ex)
    check(sbx.files.exists("/tmp/ctx.txt") is False, "the default sandbox is another")
    try:
        r = named.commands.run("cat /tmp/ctx.txt")
    except CommandExitException as e:
        r = e
    check(r.stdout == "in the context", "commands in the named context's sandbox", r)
    sbx.remove_code_context(ctx)
    e = fails(named.files.list, "/tmp")
    check(e is not None and not_found(e), "a removed context: not found", e)
    bad = open_sandbox("wrong-key-0123456789")
    e = fails(bad.files.read, "/tmp/m/1.txt")
    check(e is not None and ("401" in str(e) or "auth" in type(e).__name__.lower()),
          "files with a wrong key: 401", e)
    e = fails(bad.commands.run, "true")
    check(e is not None and ("401" in str(e) or "auth" in (type(e).__name__ + str(e)).lower()),
          "commands with a wrong key: 401", e)
    # No root inside (docs/security.md): asked for, refused, saying so.
    e = fails(sbx.commands.run, "id -u", user="root")
    check(e is not None and "no root" in str(e), "commands.run(user='root'): refused", e)
    e = fails(sbx.files.write, "/tmp/root.txt", "x", user="root")
    check(e is not None and "no root" in str(e), "files.write(user='root'): refused", e)
    r = sbx.commands.run("id -u")
    check(r.stdout.strip() == "64123", "commands run as the sandbox's one user (uid 64123)",
          r.stdout)
    if other_key:
        them = open_sandbox(other_key)
        check(them.files.exists("/tmp/m/1.txt") is False,
              "another tenant does not see the first's files")
        mine = sbx.commands.run("sleep 120", background=True, timeout=0)
        check(not any("sleep 120" in p.args for p in them.commands.list()),
              "another tenant does not list the first's commands")
        check(them.commands.kill(mine.pid) is False,
              "another tenant's kill does not reach the first's command")
        check(any(p.pid == mine.pid for p in sbx.commands.list()),
              "the first tenant's command still runs")
        mine.kill()
        ctx2 = sbx.create_code_context()
        e = fails(open_sandbox(other_key, ctx2.id).files.list, "/tmp")
        check(e is not None and not_found(e),
              "another tenant's context id is answered as one that does not exist", e)
        sbx.remove_code_context(ctx2)


try:
    s = open_sandbox(key)
    files(s)
    commands(s)
    contexts_and_keys(s)
except Exception:  # noqa: BLE001
    check(False, "the SDK run completes", traceback.format_exc())
