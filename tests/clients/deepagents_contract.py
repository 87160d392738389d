"""sandgate.deepagents.SandgateSandbox against Deep Agents' backend contract
(deepagents.backends.protocol), with whichever deepagents the Python running
it has: 0.2.8 (the oldest clients/python claims; tests/.venv-deepagents-old)
or the newest pinned (tests/.venv-langchain).  Files under /tmp and
/home/user both ways (text, a 100 KiB binary of every byte value, 10 MiB),
relative paths, the protocol's error strings, 500 KiB of command output,
Deep Agents' own file methods over /tmp, and a Deep Agent driven by a fake
chat model (no LLM) writing, editing, grepping and running a file in /tmp.
usage: deepagents_contract.py URL TOKEN — one JSON line per check {ok, name, detail}
(sandgate's client on PYTHONPATH)."""
import hashlib
import os
import sys
import traceback
from importlib.metadata import version

from deepagents import create_deep_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

from sandgate import ConflictError, InvalidError, NotFoundError, Sandgate
from sandgate.deepagents import SandgateSandbox
from checks import check

url, token = sys.argv[1:3]
DEEPAGENTS = tuple(int(x) for x in version("deepagents").split(".")[:2])
OLD_API = DEEPAGENTS < (0, 3)   # ls_info, grep_raw, glob_info; results as plain values



def brief(responses):
    return [(r.path, r.error, None if getattr(r, "content", None) is None else len(r.content))
            for r in responses]


class FakeToolModel(GenericFakeChatModel):
    """Replays scripted AIMessages; bind_tools keeps it as it is."""

    def bind_tools(self, tools, **kw):
        return self


def call(name, i, **args):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{i}"}])


def text_of(m):
    if isinstance(m.content, str):
        return m.content
    return "\n".join(b.get("text", "") for b in m.content if b.get("type") == "text")


def contract(box):
    text = "héllo\nwörld\n".encode()
    binary = bytes(range(256)) * 400               # 100 KiB, every byte value
    big = os.urandom(10 << 20)                     # 10 MiB
    names = ("text.txt", "bin.dat", "big.dat")
    for base in ("/tmp", "/home/user"):
        paths = [f"{base}/dc/{n}" for n in names]
        up = box.upload_files(list(zip(paths, (text, binary, big))))
        check([u.error for u in up] == [None] * 3 and [u.path for u in up] == paths,
              f"upload_files under {base}: text, a 100 KiB binary, 10 MiB", brief(up))
        dn = box.download_files(paths)
        check([d.error for d in dn] == [None] * 3 and [d.path for d in dn] == paths,
              f"download_files under {base}: each without error", brief(dn))
        check(dn[0].content == text, f"{base}: the text comes back as it went", dn[0].content)
        check(dn[1].content == binary, f"{base}: the 100 KiB binary comes back intact", brief(dn[1:2]))
        check(dn[2].content == big, f"{base}: the 10 MiB file comes back intact", brief(dn[2:]))
        r = box.execute(f"sha256sum {base}/dc/big.dat {base}/dc/bin.dat")
        check(r.exit_code == 0 and hashlib.sha256(big).hexdigest() in r.output and
              hashlib.sha256(binary).hexdigest() in r.output,
              f"{base}: the sandbox's own sha256sum agrees (the files are in the sandbox)", r)

    # Relative paths: the protocol's invalid_path, and nothing written.
    up = box.upload_files([("rel.txt", b"x"), ("tmp/rel.txt", b"x"), ("./rel.txt", b"x"),
                           ("", b"x")])
    check([u.error for u in up] == ["invalid_path"] * 4, "upload_files: a relative path is invalid_path",
          brief(up))
    dn = box.download_files(["dc/text.txt", "tmp/dc/text.txt", "./dc/text.txt", ""])
    check([d.error for d in dn] == ["invalid_path"] * 4 and all(d.content is None for d in dn),
          "download_files: a relative path is invalid_path (even one naming a file)", brief(dn))
    r = box.execute("ls /home/user/rel.txt /home/user/tmp/rel.txt 2>&1; true")
    check("No such file" in r.output and r.output.count("No such file") == 2,
          "and nothing was written for them", r.output)

    # The protocol's error strings.
    dn = box.download_files(["/tmp/nope", "/home/user/nope", "/tmp/nodir/x"])
    check([d.error for d in dn] == ["file_not_found"] * 3, "a missing file is file_not_found",
          brief(dn))
    dn = box.download_files(["/tmp", "/tmp/dc", "/home/user/dc", "/home/user"])
    check([d.error for d in dn] == ["is_directory"] * 4, "downloading a directory is is_directory",
          brief(dn))
    up = box.upload_files([("/tmp/dc", b"x"), ("/home/user/dc", b"x")])
    check([u.error for u in up] == ["is_directory"] * 2, "uploading onto a directory is is_directory",
          brief(up))
    r = box.execute("echo secret > /tmp/locked && chmod 000 /tmp/locked && "
                    "echo secret > /home/user/locked && chmod 000 /home/user/locked && "
                    "mkdir /tmp/ro && chmod 500 /tmp/ro")
    dn = box.download_files(["/tmp/locked", "/home/user/locked"])
    check(r.exit_code == 0 and [d.error for d in dn] == ["permission_denied"] * 2,
          "reading a mode 0000 file is permission_denied", (r, brief(dn)))
    up = box.upload_files([("/etc/x", b"x"), ("/usr/x", b"x"), ("/tmp/ro/x", b"x")])
    check([u.error for u in up] == ["permission_denied"] * 3,
          "writing /etc/x, /usr/x or into a mode 0500 directory is permission_denied", brief(up))
    up = box.upload_files([("/tmp/ok.txt", b"fine"), ("rel", b"x"), ("/etc/x", b"x")])
    check([u.error for u in up] == [None, "invalid_path", "permission_denied"],
          "partial success: one answer per file, in order", brief(up))

    # Command output: 500 KiB intact.
    r = box.execute("python3 -c 'print(\"x\" * 512000)'")
    check(r.exit_code == 0 and r.output == "x" * 512000 + "\n" and not r.truncated,
          "execute: python3 -c printing 500 KiB comes back intact", (r.exit_code, len(r.output), r.truncated))
    r = box.execute("python -c 'print(\"y\" * 512000)'")
    check(r.exit_code == 0 and r.output == "y" * 512000 + "\n" and not r.truncated,
          "execute: python -c printing 500 KiB comes back intact",
          (r.exit_code, len(r.output), r.output[:200], r.truncated))
    r = box.execute("echo out; echo err >&2; exit 3")
    check(r.output == "out\nerr\n" and r.exit_code == 3 and not r.truncated,
          "execute: stdout then stderr, the exit code", r)
    r = box.execute("printf 'a\\0b'")
    check(r.output == "a\0b" and r.exit_code == 0, "execute: a NUL byte in the output", r)


def client_anywhere(box):
    """The client's files anywhere in the sandbox, which the backend uses."""
    sg, ctx = box.client, box.id
    e = sg.write_path(ctx, "/tmp/cl/a.txt", "anywhere")
    check(e.path == "/tmp/cl/a.txt" and e.type == "file" and e.size == 8 and e.owner,
          "client: write_path answers the entry", e)
    check(sg.read_path(ctx, "/tmp/cl/a.txt") == b"anywhere", "client: read_path")
    st = sg.stat_path(ctx, "/tmp/cl")
    check(st.type == "dir" and st.mode is not None and st.permissions, "client: stat_path", st)
    d = sg.make_dir(ctx, "/tmp/cl/sub/deeper")
    m = sg.move_path(ctx, "/tmp/cl/a.txt", "/tmp/cl/sub/b.txt")
    names = [x.path for x in sg.list_path(ctx, "/tmp/cl", depth=3)]
    check(d.type == "dir" and m.path == "/tmp/cl/sub/b.txt" and
          names == ["/tmp/cl/sub", "/tmp/cl/sub/b.txt", "/tmp/cl/sub/deeper"],
          "client: make_dir, move_path, list_path with depth", (d, m, names))
    sg.remove_path(ctx, "/tmp/cl")
    for call, want, name in (
            (lambda: sg.read_path(ctx, "/tmp/cl/sub/b.txt"), (NotFoundError, "not_found"),
             "a missing path: NotFoundError, code not_found"),
            (lambda: sg.read_path(ctx, "tmp/x"), (InvalidError, "invalid_path"),
             "a relative path: InvalidError, code invalid_path, before any request"),
            (lambda: sg.read_path(ctx, "/tmp"), (IsADirectoryError, None),
             "read_path of a directory: IsADirectoryError"),
            (lambda: sg.make_dir(ctx, "/tmp/dc/text.txt"), (ConflictError, "exists"),
             "make_dir onto a file: ConflictError, code exists")):
        try:
            call()
            got = None
        except Exception as x:  # noqa: BLE001 - the class is what is checked
            got = x
        check(isinstance(got, want[0]) and getattr(got, "code", None) == want[1],
              f"client: {name}", repr(got))


def own_methods(box):
    """Deep Agents' own BaseSandbox methods (built on execute and the file
    transfers), over /tmp."""
    w = box.write("/tmp/own/notes.txt", "alpha\nbeta\ngamma beta\n")
    check(w.error is None, "write (BaseSandbox) a file in /tmp", w)
    e = box.edit("/tmp/own/notes.txt", "alpha", "delta")
    check(e.error is None and e.occurrences == 1, "edit it", e)
    e = box.edit("/tmp/own/notes.txt", "beta", "BETA", replace_all=True)
    check(e.error is None and e.occurrences == 2, "edit with replace_all", e)
    r = box.read("/tmp/own/notes.txt")
    content = r if OLD_API else (r.file_data or {}).get("content", r.error)
    check("delta" in content and "gamma BETA" in content and "alpha" not in content,
          "read it back", content)
    dn = box.download_files(["/tmp/own/notes.txt"])
    check(dn[0].content == b"delta\nBETA\ngamma BETA\n", "the edits are in the file", brief(dn))
    if OLD_API:
        infos, matches = box.ls_info("/tmp/own"), box.grep_raw("gamma", path="/tmp/own")
        globbed = box.glob_info("*.txt", path="/tmp/own")
    else:
        infos = box.ls("/tmp/own").entries or []
        matches = box.grep("gamma", path="/tmp/own").matches or []
        globbed = box.glob("*.txt", path="/tmp/own").matches or []
    check(any(i["path"].endswith("notes.txt") for i in infos), "ls", infos)
    check(len(matches) == 1 and matches[0]["path"] == "/tmp/own/notes.txt" and
          matches[0]["line"] == 3 and "gamma" in matches[0]["text"], "grep: path, line, text", matches)
    check(any(g["path"].endswith("notes.txt") for g in globbed), "glob", globbed)
    w = box.write("/tmp/own/notes.txt", "again")
    if OLD_API:
        check(w.error, "write onto an existing file is refused (0.2's contract)", w)
    if not OLD_API:
        d = box.delete("/tmp/own/notes.txt")
        check(d.error is None and box.download_files(["/tmp/own/notes.txt"])[0].error ==
              "file_not_found", "delete", d)


def agent(box):
    """A Deep Agent, its model a script of tool calls, over /tmp."""
    model = FakeToolModel(messages=iter([
        call("write_file", 1, file_path="/tmp/agent/hello.py",
             content="def greet():\n    return 'hello from sandgate'\nprint(greet())\n"),
        call("edit_file", 2, file_path="/tmp/agent/hello.py", old_string="hello from",
             new_string="edited in"),
        call("grep", 3, pattern="greet", path="/tmp/agent", output_mode="content"),
        call("execute", 4, command="python3 /tmp/agent/hello.py"),
        call("read_file", 5, file_path="/tmp/agent/hello.py"),
        call("ls", 6, path="/tmp/agent"),
        call("glob", 7, pattern="*.py", path="/tmp/agent"),
        AIMessage(content="done")]))
    state = create_deep_agent(model=model, backend=box).invoke(
        {"messages": [{"role": "user", "content": "write, edit, grep and run a file in /tmp"}]})
    tms = {m.name: text_of(m) for m in state["messages"] if isinstance(m, ToolMessage)}
    check("/tmp/agent/hello.py" in tms.get("write_file", "") and "rror" not in tms.get("write_file", ""),
          "agent: write_file in /tmp", tms.get("write_file"))
    check("rror" not in tms.get("edit_file", "x") and "1" in tms.get("edit_file", ""),
          "agent: edit_file", tms.get("edit_file"))
    g = tms.get("grep", "")
    check("1: def greet" in g and "3: print(greet())" in g, "agent: grep (lines and numbers)", g)
    check("edited in sandgate" in tms.get("execute", ""), "agent: execute runs the edited file",
          tms.get("execute"))
    check("edited in sandgate" in tms.get("read_file", ""), "agent: read_file", tms.get("read_file"))
    check("hello.py" in tms.get("ls", "") and "hello.py" in tms.get("glob", ""), "agent: ls and glob",
          (tms.get("ls"), tms.get("glob")))
    check(state["messages"][-1].content == "done", "agent: the loop ends with the model's answer",
          state["messages"][-1])
    dn = box.download_files(["/tmp/agent/hello.py"])
    check(dn[0].content and b"edited in sandgate" in dn[0].content,
          "agent: the file is in the sandbox's /tmp", brief(dn))


def main():
    sg = Sandgate(url, token)
    with SandgateSandbox(sg) as box:
        for part in (contract, client_anywhere, own_methods, agent):
            try:
                part(box)
            except Exception:
                check(False, f"{part.__name__} ran to its end", traceback.format_exc())
    check(box.id not in {c.id for c in sg.list_contexts()}, "close() deletes the context")


main()
