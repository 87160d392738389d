"""sandgate-cli (also `python -m sandgate`): run code, commands, contexts and
files of a sandgate server from a shell.  Exit codes: see EXIT_CODES."""
import argparse
import json
import os
import sys

from . import errors
from .client import Sandgate

# The one table of exit codes (docs/clients.md repeats it).
EXIT_OK = 0
EXIT_FAILED = 1          # the code raised, the command exited non-zero or timed out
EXIT_USAGE = 2           # bad arguments, an unreadable local file (argparse's own code)
EXIT_CODES = [
    (errors.SandgateConnectionError, 3),                      # sandgate not reachable
    (errors.UnauthorizedError, 4), (errors.ForbiddenError, 4),  # 401, 403
    (errors.NotFoundError, 5),                                # 404: context, file
    (errors.InvalidError, 6), (errors.MethodNotAllowedError, 6),  # 400, 405
    (errors.ConflictError, 7), (errors.LimitExceededError, 7),
    (errors.QuotaExceededError, 7), (errors.TooManyRequestsError, 7),
    (errors.InsufficientStorageError, 7),                     # 409, 413, 429, 507
    (errors.SandgateError, 8),                                # 503, 504, other answers
]


def exit_code(exc):
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))


class _Usage(Exception):
    pass


def _env(pairs):
    out = {}
    for p in pairs or []:
        name, eq, value = p.partition("=")
        if not eq or not name:
            raise _Usage(f"--env wants NAME=VALUE, not {p!r}")
        out[name] = value
    return out


def _print_json(doc):
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _write(stream, text):
    stream.write(text)
    stream.flush()


def cmd_run(sg, a):
    if a.file == "-":
        code = sys.stdin.read()
    else:
        try:
            with open(a.file, encoding="utf-8") as f:
                code = f.read()
        except OSError as e:
            raise _Usage(f"cannot read {a.file}: {e.strerror}")
    if a.json:
        ex = sg.execute(code, context=a.context, language=a.language, timeout=a.timeout,
                        env_vars=_env(a.env))
        _print_json(ex.to_dict())
        return EXIT_OK if ex.ok else EXIT_FAILED

    def on_result(r):
        if r.text is not None:
            _write(sys.stdout, r.text + "\n")
        for mime, data in r.images():
            _write(sys.stderr, f"[{mime} result, {len(data) * 3 // 4} bytes]\n")

    ex = sg.execute(code, context=a.context, language=a.language, timeout=a.timeout,
                    env_vars=_env(a.env), on_stdout=lambda t: _write(sys.stdout, t),
                    on_stderr=lambda t: _write(sys.stderr, t), on_result=on_result)
    for art in ex.artifacts:
        _write(sys.stderr, f"[artifact {art.path}, {art.size} bytes]\n")
    if ex.error:
        _write(sys.stderr, ex.error.text + "\n")
        return EXIT_FAILED
    return EXIT_OK


def cmd_exec(sg, a):
    res = sg.run_command(" ".join(a.command), context=a.context, timeout=a.timeout,
                         env_vars=_env(a.env))
    if a.json:
        _print_json(res.to_dict())
    else:
        _write(sys.stdout, res.stdout)
        _write(sys.stderr, res.stderr)
        if res.error:
            _write(sys.stderr, f"{res.error.name}: {res.error.value}\n")
    return EXIT_OK if res.ok else EXIT_FAILED


def _ctx_line(c):
    return f"{c.id}\t{c.language}\t{c.state}\t{c.cwd}" + ("\tinternet" if c.internet else "")


def cmd_ctx(sg, a):
    if a.ctx_cmd == "new":
        c = sg.create_context(language=a.language, cwd=a.cwd, internet=a.internet or None)
        _print_json(c.info) if a.json else print(c.id)
    elif a.ctx_cmd == "list":
        cs = sg.list_contexts()
        if a.json:
            _print_json([c.info for c in cs])
        else:
            for c in cs:
                print(_ctx_line(c))
    elif a.ctx_cmd == "show":
        c = sg.get_context(a.id)
        _print_json(c.info) if a.json else print(_ctx_line(c))
    elif a.ctx_cmd == "rm":
        for i in a.ids:
            sg.delete_context(i)
    elif a.ctx_cmd in ("restart", "pause", "resume"):
        c = getattr(sg, a.ctx_cmd + "_context")(a.id)
        if a.json and c is not None:
            _print_json(c.info)
    return EXIT_OK


def cmd_files(sg, a):
    ctx = a.context
    if not ctx:
        raise _Usage("files: which context? --context ID or SANDGATE_CONTEXT")
    if a.files_cmd == "put":
        if a.local == "-":
            info = sg.upload(ctx, a.remote, sys.stdin.buffer.read())
        else:
            try:
                f = open(a.local, "rb")
            except OSError as e:
                raise _Usage(f"cannot read {a.local}: {e.strerror}")
            with f:
                info = sg.upload(ctx, a.remote or os.path.basename(a.local), f)
        _print_json(info) if a.json else None
    elif a.files_cmd == "get":
        data = sg.download(ctx, a.remote)
        if a.local in (None, "-"):
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            with open(a.local, "wb") as f:
                f.write(data)
    elif a.files_cmd == "ls":
        entries = sg.list_files(ctx, a.path or "")
        if a.json:
            _print_json([e.__dict__ for e in entries])
        else:
            for e in entries:
                print(f"{e.type:7} {e.size:>10}  {e.path}")
    elif a.files_cmd == "rm":
        for p in a.paths:
            sg.delete_file(ctx, p)
    return EXIT_OK


def parser():
    p = argparse.ArgumentParser(
        prog="sandgate-cli",
        description="Run code in sandgate's sandboxed Jupyter kernels.",
        epilog="exit codes: 0 success; 1 the code raised or the command failed; 2 usage; "
               "3 sandgate unreachable; 4 unauthorized or forbidden (401, 403); 5 not found "
               "(404); 6 invalid request (400, 405); 7 conflict, limit or quota (409, 413, 429, "
               "507); "
               "8 server error (503, 504, other)")
    p.add_argument("--url", default=os.environ.get("SANDGATE_URL"),
                   help="sandgate's URL (env SANDGATE_URL; default http://127.0.0.1:49999)")
    p.add_argument("--api-key", metavar="KEY",
                   help="the tenant's key, or the admin's token (env SANDGATE_API_KEY)")
    p.add_argument("--token", metavar="KEY",
                   help="the older name of --api-key (env SANDGATE_TOKEN); --api-key wins")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", required=True)

    def ctx_arg(q, help="the context (env SANDGATE_CONTEXT; default: the language's default "
                        "context)"):
        q.add_argument("-c", "--context", default=os.environ.get("SANDGATE_CONTEXT"), help=help)

    q = sub.add_parser("run", help="run code from FILE, or stdin for -; output is streamed")
    q.add_argument("file", metavar="FILE|-")
    ctx_arg(q)
    q.add_argument("-l", "--language", help="the default context of this language")
    q.add_argument("-t", "--timeout", type=float, help="seconds")
    q.add_argument("-e", "--env", action="append", metavar="NAME=VALUE")
    q.set_defaults(func=cmd_run)

    q = sub.add_parser("exec", help="run a shell command in the context's sandbox (options "
                                    "before CMD; the rest of the line is the command)")
    ctx_arg(q)
    q.add_argument("-t", "--timeout", type=float, help="seconds")
    q.add_argument("-e", "--env", action="append", metavar="NAME=VALUE")
    q.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD")
    q.set_defaults(func=cmd_exec)

    q = sub.add_parser("ctx", help="contexts: new, list, show, rm, restart, pause, resume")
    cs = q.add_subparsers(dest="ctx_cmd", metavar="ACTION", required=True)
    n = cs.add_parser("new", help="create a context; prints its id")
    n.add_argument("-l", "--language")
    n.add_argument("--cwd")
    n.add_argument("--internet", action="store_true")
    cs.add_parser("list", help="list the contexts: id, language, state, cwd")
    for name in ("show", "restart", "pause", "resume"):
        cs.add_parser(name, help=f"{name} a context").add_argument("id")
    cs.add_parser("rm", help="delete contexts").add_argument("ids", nargs="+", metavar="ID")
    q.set_defaults(func=cmd_ctx)

    q = sub.add_parser("files", help="a context's workspace: put, get, ls, rm")
    fs = q.add_subparsers(dest="files_cmd", metavar="ACTION", required=True)
    f = fs.add_parser("put", help="upload LOCAL (- for stdin) as REMOTE")
    f.add_argument("local", metavar="LOCAL|-")
    f.add_argument("remote", metavar="REMOTE", nargs="?")
    f = fs.add_parser("get", help="download REMOTE to LOCAL (default stdout)")
    f.add_argument("remote", metavar="REMOTE")
    f.add_argument("local", metavar="LOCAL|-", nargs="?")
    f = fs.add_parser("ls", help="list a directory (default the workspace)")
    f.add_argument("path", nargs="?")
    fs.add_parser("rm", help="remove files or directories").add_argument("paths", nargs="+",
                                                                          metavar="PATH")
    for f in fs.choices.values():
        ctx_arg(f, help="the context (env SANDGATE_CONTEXT); required")
    q.set_defaults(func=cmd_files)
    return p


def main(argv=None):
    p = parser()
    a = p.parse_args(argv)
    if a.cmd == "files" and a.files_cmd == "put" and a.local == "-" and not a.remote:
        p.error("files put -: name the REMOTE file")
    if a.cmd == "exec" and not a.command:
        p.error("exec: which command?")
    sg = Sandgate(a.url, a.api_key, token=a.token)
    try:
        return a.func(sg, a)
    except _Usage as e:
        print(f"sandgate-cli: {e}", file=sys.stderr)
        return EXIT_USAGE
    except errors.SandgateError as e:
        print(f"sandgate-cli: {e}", file=sys.stderr)
        return exit_code(e)
    except (IsADirectoryError, NotADirectoryError) as e:
        print(f"sandgate-cli: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
