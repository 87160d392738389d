"""The HTTP client: contexts, executions (streamed NDJSON), commands, files.
Blocking, thread-safe (no state is shared between requests), standard
library only."""
import contextlib
import json
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from .errors import (InvalidError, NotFoundError, ProtocolError, SandgateConnectionError,
                     SandgateError, from_response)

DEFAULT_URL = "http://127.0.0.1:49999"
# A stream sends a keepalive every 5 s, so a read waits at most that long
# while the code runs; other requests answer within seconds.
DEFAULT_TIMEOUT = 120.0

# result fields (docs/api.md) and the MIME types they stand for
MIME_FIELDS = {
    "text": "text/plain", "html": "text/html", "markdown": "text/markdown",
    "svg": "image/svg+xml", "png": "image/png", "jpeg": "image/jpeg", "pdf": "application/pdf",
    "latex": "text/latex", "json": "application/json", "javascript": "application/javascript",
    "data": "e2b/data", "chart": "e2b/chart",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text):
    """Text without terminal colour codes (IPython colours its tracebacks)."""
    return _ANSI.sub("", text)


@dataclass
class Result:
    """A rich result: the cell's value (`is_main_result`) or a display()."""
    raw: Dict[str, Any]

    @property
    def is_main_result(self) -> bool:
        return bool(self.raw.get("is_main_result"))

    def __getattr__(self, name):
        if name in MIME_FIELDS or name == "extra":
            return self.raw.get(name)
        raise AttributeError(name)

    @property
    def bundle(self) -> Dict[str, Any]:
        """The result as a MIME bundle: {"text/plain": …, "image/png": base64, …}."""
        out = {mime: self.raw[f] for f, mime in MIME_FIELDS.items() if f in self.raw}
        out.update(self.raw.get("extra") or {})
        return out

    def images(self):
        """[(mime, base64)] for the PNG and JPEG images in it."""
        return [(m, v) for m, v in self.bundle.items() if m in ("image/png", "image/jpeg")]


@dataclass
class ExecutionError:
    name: str
    value: str
    traceback: str

    @property
    def text(self) -> str:
        """The traceback as plain text, ending with `name: value`."""
        tb = strip_ansi(self.traceback or "").rstrip("\n")
        last = f"{self.name}: {self.value}"
        if not tb.endswith(last):
            tb = (tb + "\n" + last) if tb else last
        return tb


@dataclass
class Artifact:
    """A file the execution wrote under output/ (download with Sandgate.download_artifact)."""
    path: str
    size: int
    mime: str
    url: str


@dataclass
class Execution:
    stdout: str = ""
    stderr: str = ""
    results: List[Result] = field(default_factory=list)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    artifacts: List[Artifact] = field(default_factory=list)
    context_id: Optional[str] = None

    @property
    def main_result(self) -> Optional[Result]:
        return next((r for r in self.results if r.is_main_result), None)

    @property
    def text(self) -> Optional[str]:
        """The text of the cell's value (None when it had none)."""
        r = self.main_result
        return r.text if r else None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self):
        return {"stdout": self.stdout, "stderr": self.stderr,
                "results": [r.raw for r in self.results],
                "error": self.error and {"name": self.error.name, "value": self.error.value,
                                         "traceback": self.error.traceback},
                "execution_count": self.execution_count,
                "artifacts": [a.__dict__ for a in self.artifacts], "context_id": self.context_id}


@dataclass
class CommandResult:
    stdout: str
    stderr: str
    exit_code: int
    error: Optional[ExecutionError] = None
    artifacts: List[Artifact] = field(default_factory=list)
    duration_ms: Optional[int] = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.error is None

    def to_dict(self):
        return {"stdout": self.stdout, "stderr": self.stderr, "exit_code": self.exit_code,
                "error": self.error and {"name": self.error.name, "value": self.error.value},
                "artifacts": [a.__dict__ for a in self.artifacts], "duration_ms": self.duration_ms}


@dataclass
class FileEntry:
    """A file, directory or link.  The workspace's listings fill the first
    five; entries anywhere in the sandbox (stat_path, list_path...) all."""
    name: str
    path: str
    type: str            # file, dir, symlink, other
    size: int
    modified: str
    mode: Optional[int] = None           # permission bits (0o644)
    permissions: Optional[str] = None    # "rw-r--r--"
    owner: Optional[str] = None
    group: Optional[str] = None
    symlink_target: Optional[str] = None

    @classmethod
    def from_json(cls, e):
        return cls(e.get("name", ""), e.get("path", ""), e.get("type", ""), e.get("size", 0),
                   e.get("modified", ""), e.get("mode"), e.get("permissions"), e.get("owner"),
                   e.get("group"), e.get("symlink_target"))


def _artifacts(items):
    return [Artifact(a.get("path", ""), a.get("size", 0), a.get("mime", ""), a.get("url", ""))
            for a in items or []]


@dataclass
class Snapshot:
    """A context's saved state (variables and workspace files): start new
    contexts from it, or roll its context (or one made from it) back to it."""
    id: str
    context_id: str
    name: Optional[str]
    created: str
    bytes: int
    tenant: Optional[str] = None

    @classmethod
    def from_json(cls, s):
        return cls(s.get("id", ""), s.get("context_id", ""), s.get("name"), s.get("created", ""),
                   s.get("bytes", 0), s.get("tenant"))


@dataclass
class Template:
    """A template the server was started with (--template): what a context
    made from it starts with.  `root` is "host", "directory" or "image";
    `preload` whether code runs in its kernels before any of the tenant's;
    `pool_ready` of its `pool_size` warm kernels are waiting now;
    `snapshot_bytes` its own snapshot, taken once after the preload ran (0:
    none), which a start restores while its pool is empty."""
    name: str
    kernelspec: str
    language: str
    root: str
    preload: bool
    pool_size: int
    pool_ready: int
    snapshot_bytes: int = 0

    @classmethod
    def from_json(cls, t):
        return cls(t.get("name", ""), t.get("kernelspec", ""), t.get("language", ""),
                   t.get("root", ""), bool(t.get("preload")), t.get("pool_size", 0),
                   t.get("pool_ready", 0), t.get("snapshot_bytes", 0))


def _id(context):
    """The id of a context or a snapshot (either object, or its id)."""
    if context is None or isinstance(context, str):
        return context
    return context.id


class Context:
    """A session: its own sandboxed kernel and workspace.  The methods are
    the client's, with this context filled in."""

    def __init__(self, client, info):
        self.client = client
        self.info = info

    id = property(lambda self: self.info["id"])
    language = property(lambda self: self.info.get("language"))
    cwd = property(lambda self: self.info.get("cwd"))
    state = property(lambda self: self.info.get("state"))
    internet = property(lambda self: bool(self.info.get("internet")))
    template = property(lambda self: self.info.get("template"))
    # A server started with --notebook-url: the JupyterLab that opens this
    # context's kernel, to hand the session to a person (else None).
    notebook_url = property(lambda self: self.info.get("notebook_url"))

    def __repr__(self):
        return f"Context({self.id!r}, language={self.language!r}, state={self.state!r})"

    def execute(self, code, **kw) -> Execution:
        return self.client.execute(code, context=self.id, **kw)

    def run_command(self, command, **kw) -> CommandResult:
        return self.client.run_command(command, context=self.id, **kw)

    def upload(self, path, data):
        return self.client.upload(self.id, path, data)

    def download(self, path) -> bytes:
        return self.client.download(self.id, path)

    def list_files(self, path="") -> List[FileEntry]:
        return self.client.list_files(self.id, path)

    def delete_file(self, path):
        return self.client.delete_file(self.id, path)

    def write_path(self, path, data) -> FileEntry:
        return self.client.write_path(self.id, path, data)

    def read_path(self, path) -> bytes:
        return self.client.read_path(self.id, path)

    def stat_path(self, path) -> FileEntry:
        return self.client.stat_path(self.id, path)

    def list_path(self, path, depth=1) -> List[FileEntry]:
        return self.client.list_path(self.id, path, depth)

    def remove_path(self, path):
        return self.client.remove_path(self.id, path)

    def make_dir(self, path) -> FileEntry:
        return self.client.make_dir(self.id, path)

    def move_path(self, src, dst) -> FileEntry:
        return self.client.move_path(self.id, src, dst)

    def refresh(self):
        self.info = self.client.get_context(self.id).info
        return self

    def restart(self):
        self.client.restart_context(self.id)

    def pause(self):
        self.info = self.client.pause_context(self.id).info

    def resume(self):
        self.info = self.client.resume_context(self.id).info

    def delete(self):
        self.client.delete_context(self.id)

    def snapshot(self, name: Optional[str] = None) -> Snapshot:
        """Saves this context's variables and files (see Sandgate.snapshot_context)."""
        return self.client.snapshot_context(self.id, name)

    def fork(self, keep_snapshot: bool = False) -> "Context":
        """A new context with this one's state, each going its own way after."""
        return self.client.fork_context(self.id, keep_snapshot)

    def restore(self, snapshot) -> "Context":
        """Rolls this context back to `snapshot` (a Snapshot or its id)."""
        self.info = self.client.restore_context(self.id, snapshot).info
        return self

    def snapshots(self) -> List[Snapshot]:
        """The snapshots taken of this context."""
        return self.client.list_snapshots(self.id)


def api_key_from(api_key=None, token=None, environ=None):
    """The key to send: `api_key`, else `token` (its older name), else the
    environment's SANDGATE_API_KEY, else SANDGATE_TOKEN.  The first one set
    wins, so an explicit argument beats the environment and the new name
    beats the old; "" counts as set (no key at all)."""
    env = os.environ if environ is None else environ
    for v in (api_key, token, env.get("SANDGATE_API_KEY"), env.get("SANDGATE_TOKEN")):
        if v is not None:
            return v
    return None


class Sandgate:
    """A sandgate server.  `url` defaults to the environment's SANDGATE_URL
    (else http://127.0.0.1:49999); `api_key` is the tenant's key (from
    `sandgate keys add`, or the admin's --token), by default SANDGATE_API_KEY.
    `token` is its older name, still taken (so is SANDGATE_TOKEN); when both
    are given, `api_key` wins (see api_key_from).  `timeout` is the socket
    timeout of each request, in seconds."""

    def __init__(self, url=None, api_key=None, timeout=DEFAULT_TIMEOUT, *, token=None):
        self.url = (url or os.environ.get("SANDGATE_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key_from(api_key, token)
        self.timeout = timeout

    @property
    def token(self):
        """The older name of api_key."""
        return self.api_key

    @token.setter
    def token(self, value):
        self.api_key = value

    def __repr__(self):
        return f"Sandgate({self.url!r})"

    # --- HTTP ----------------------------------------------------------------------

    def _open(self, method, path, body=None, headers=None, timeout=None):
        """The response of a request with a 2xx status; raises the error's
        class otherwise.  `body`: bytes, a file object, or a JSON value."""
        h = {"Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        data = body
        if body is not None and not isinstance(body, (bytes, bytearray)) and \
                not hasattr(body, "read"):
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            with e:
                raise from_response(e.code, e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise SandgateConnectionError(f"cannot reach sandgate at {self.url}: {reason}") from None

    def _json(self, method, path, body=None, timeout=None):
        try:
            with self._open(method, path, body, timeout=timeout) as r:
                data = r.read()
        except (socket.timeout, OSError) as e:
            if isinstance(e, SandgateError):
                raise
            raise SandgateConnectionError(f"{method} {path}: {e}") from None
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError:
            raise ProtocolError(f"{method} {path}: not JSON: {data[:200]!r}") from None

    # --- contexts ------------------------------------------------------------------

    def create_context(self, language=None, cwd=None, internet=None, snapshot=None,
                       template=None) -> Context:
        """A new context.  `language`: python (the default), javascript,
        typescript (js and ts for short), r, bash, or any installed
        kernel's language.  With `snapshot` (a Snapshot or its id), it
        starts with the snapshot's variables and files, and its context's
        language, cwd, template and network (give none of those with it).  With
        `template` (a name from templates()), it starts from the template's
        root, kernel and preload (not with `language`; NotFoundError for an
        unknown name)."""
        body = {k: v for k, v in (("language", language), ("cwd", cwd), ("internet", internet),
                                  ("snapshot", _id(snapshot)), ("template", template))
                if v is not None}
        return Context(self, self._json("POST", "/contexts", body))

    def list_contexts(self) -> List[Context]:
        return [Context(self, c) for c in self._json("GET", "/contexts")]

    def get_context(self, context) -> Context:
        return Context(self, self._json("GET", "/contexts/" + _q(_id(context))))

    def delete_context(self, context):
        self._json("DELETE", "/contexts/" + _q(_id(context)))

    def restart_context(self, context):
        self._json("POST", f"/contexts/{_q(_id(context))}/restart")

    def pause_context(self, context) -> Context:
        return Context(self, self._json("POST", f"/contexts/{_q(_id(context))}/pause"))

    def resume_context(self, context) -> Context:
        return Context(self, self._json("POST", f"/contexts/{_q(_id(context))}/resume"))

    @contextlib.contextmanager
    def context(self, language=None, cwd=None, internet=None, snapshot=None, template=None):
        """A throwaway context: created on entry, deleted on exit."""
        ctx = self.create_context(language=language, cwd=cwd, internet=internet,
                                  snapshot=snapshot, template=template)
        try:
            yield ctx
        finally:
            with contextlib.suppress(NotFoundError, SandgateConnectionError):
                self.delete_context(ctx.id)

    # --- templates --------------------------------------------------------------------

    def list_templates(self) -> List[Template]:
        """The server's templates (the same for every tenant): create_context(
        template=name) starts a context from one."""
        return [Template.from_json(t) for t in self._json("GET", "/templates")]

    def templates(self) -> List[Template]:
        """The server's templates (list_templates())."""
        return self.list_templates()

    # --- snapshots, fork, roll-back -------------------------------------------------

    def snapshot_context(self, context, name: Optional[str] = None) -> Snapshot:
        """Saves a context's variables and workspace files.  ConflictError
        while it runs code (or has a network); QuotaExceededError past the
        server's --max-snapshots."""
        body = {"name": name} if name is not None else None
        return Snapshot.from_json(
            self._json("POST", f"/contexts/{_q(_id(context))}/snapshots", body))

    def fork_context(self, context, keep_snapshot: bool = False) -> Context:
        """A new context with a copy of the context's state.  The snapshot it
        is made from is deleted unless `keep_snapshot` (then its id is the
        new context's info["snapshot_id"])."""
        body = {"keep_snapshot": True} if keep_snapshot else None
        return Context(self, self._json("POST", f"/contexts/{_q(_id(context))}/fork", body))

    def restore_context(self, context, snapshot) -> Context:
        """Rolls a context back to a snapshot (a Snapshot or its id) of
        itself or of a context it was made from (else InvalidError)."""
        return Context(self, self._json("POST", f"/contexts/{_q(_id(context))}/restore",
                                        {"snapshot": _id(snapshot)}))

    def list_snapshots(self, context=None) -> List[Snapshot]:
        """The tenant's snapshots; of one context when given."""
        path = f"/contexts/{_q(_id(context))}/snapshots" if context is not None else "/snapshots"
        return [Snapshot.from_json(s) for s in self._json("GET", path)]

    def snapshots(self) -> List[Snapshot]:
        """The tenant's snapshots (list_snapshots())."""
        return self.list_snapshots()

    def snapshot(self, snapshot) -> Snapshot:
        """One snapshot, by id (NotFoundError when unknown or deleted)."""
        return Snapshot.from_json(self._json("GET", "/snapshots/" + _q(_id(snapshot))))

    def get_snapshot(self, snapshot) -> Snapshot:
        """The same as snapshot()."""
        return self.snapshot(snapshot)

    def delete_snapshot(self, snapshot):
        """Deletes a snapshot; contexts made from it keep their state."""
        self._json("DELETE", "/snapshots/" + _q(_id(snapshot)))

    # --- executions ----------------------------------------------------------------

    def execute(self, code, context=None, language=None,
                on_stdout: Optional[Callable[[str], Any]] = None,
                on_stderr: Optional[Callable[[str], Any]] = None,
                on_result: Optional[Callable[[Result], Any]] = None,
                on_error: Optional[Callable[[ExecutionError], Any]] = None,
                timeout=None, env_vars=None, rich_formats=None) -> Execution:
        """Runs code in `context` (an id or a Context; default: the default
        context of `language`, as create_context's: python when neither is
        given), calling the callbacks as output arrives.  rich_formats:
        whether results carry Result.chart and Result.data (None: the
        server's --rich-formats, on unless turned off).  An
        exception in the code is not raised: it is `Execution.error` (as are
        sandgate's TimeoutError and KernelError)."""
        body = {"code": code}
        if context is not None:
            body["context_id"] = _id(context)
        if language is not None:
            body["language"] = language
        if env_vars:
            body["env_vars"] = dict(env_vars)
        if timeout is not None:
            body["timeout"] = timeout
        if rich_formats is not None:
            body["rich_formats"] = bool(rich_formats)
        ex = Execution(context_id=body.get("context_id"))
        ended = False
        with self._open("POST", "/execute", body, headers={"Accept": "application/x-ndjson"}) as r:
            try:
                for line in r:
                    if not line.strip():
                        continue
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        raise ProtocolError(f"execute: a line that is not JSON: {line[:200]!r}")
                    t = msg.get("type")
                    if t == "stdout":
                        ex.stdout += msg.get("text", "")
                        if on_stdout:
                            on_stdout(msg.get("text", ""))
                    elif t == "stderr":
                        ex.stderr += msg.get("text", "")
                        if on_stderr:
                            on_stderr(msg.get("text", ""))
                    elif t == "result":
                        res = Result({k: v for k, v in msg.items() if k != "type"})
                        ex.results.append(res)
                        if on_result:
                            on_result(res)
                    elif t == "error":
                        ex.error = ExecutionError(msg.get("name", ""), msg.get("value", ""),
                                                  msg.get("traceback", ""))
                        if on_error:
                            on_error(ex.error)
                    elif t == "number_of_executions":
                        ex.execution_count = msg.get("execution_count")
                    elif t == "artifact":
                        ex.artifacts += _artifacts([msg])
                    elif t == "end_of_execution":
                        ended = True
                        break
            except (socket.timeout, OSError) as e:
                raise SandgateConnectionError(f"execute: the stream broke: {e}") from None
        if not ended:
            raise SandgateConnectionError("execute: the stream ended before end_of_execution")
        return ex

    def run_command(self, command, context=None, timeout=None, env_vars=None) -> CommandResult:
        """Runs a shell command (/bin/sh -c) in `context`'s sandbox (default:
        the default Python context), in its working directory.  A non-zero
        exit is not raised: see `exit_code`."""
        body = {"command": command}
        if context is not None:
            body["context_id"] = _id(context)
        if env_vars:
            body["env_vars"] = dict(env_vars)
        if timeout is not None:
            body["timeout"] = timeout
        # No keepalives here: wait for the command's own time limit and more.
        wait = max(self.timeout or 0, (timeout or 300) + 30)
        doc = self._json("POST", "/execute", body, timeout=wait)
        if not isinstance(doc, dict) or "exit_code" not in doc:
            raise ProtocolError(f"command: unexpected answer {str(doc)[:200]}")
        err = doc.get("error")
        return CommandResult(doc.get("stdout", ""), doc.get("stderr", ""), doc["exit_code"],
                             ExecutionError(err.get("name", ""), err.get("value", ""), "")
                             if isinstance(err, dict) else None,
                             _artifacts(doc.get("artifacts")), doc.get("duration_ms"))

    # --- files -----------------------------------------------------------------------

    def _files(self, context, path):
        return f"/contexts/{_q(_id(context))}/files/{_q(path.lstrip('/'), '/')}"

    def upload(self, context, path, data):
        """Writes a file in the context's workspace (`path` relative to it;
        parents are created).  `data`: bytes, str (UTF-8) or a binary file
        object (streamed).  Returns {"path", "size"}."""
        headers = {"Content-Type": "application/octet-stream"}
        data = _body(data, headers)
        with self._open("PUT", self._files(context, path), data, headers=headers) as r:
            return json.loads(r.read() or b"{}")

    def download(self, context, path) -> bytes:
        """A file's bytes.  A directory raises IsADirectoryError."""
        with self._open("GET", self._files(context, path), headers={"Accept": "*/*"}) as r:
            data = r.read()
            ctype = r.headers.get("Content-Type", "")
        if ctype.startswith("application/json") and _is_listing(data, path):
            raise IsADirectoryError(path)
        return data

    def download_artifact(self, artifact: Artifact) -> bytes:
        with self._open("GET", artifact.url, headers={"Accept": "*/*"}) as r:
            return r.read()

    def list_files(self, context, path="") -> List[FileEntry]:
        """A directory's entries (the workspace's root by default)."""
        doc = self._json("GET", self._files(context, path))
        if not _is_listing(json.dumps(doc).encode(), path):
            raise NotADirectoryError(path)
        return [FileEntry.from_json(e) for e in doc["entries"]]

    def delete_file(self, context, path):
        """Removes a file, or a directory with everything in it."""
        self._json("DELETE", self._files(context, path))

    # --- files anywhere in the sandbox (absolute paths) ------------------------------
    # Each path is absolute and resolved inside the context's sandbox, as
    # its user (/tmp/..., /home/user/..., /etc/...).  A relative path raises
    # InvalidError (code "invalid_path") before any request.  Failures raise
    # the error's class with `code`: not_found (NotFoundError), is_directory,
    # not_directory, exists, cross_device (ConflictError), permission_denied,
    # not_regular (ForbiddenError), too_large, no_space (LimitExceededError).

    def _anywhere(self, context, path, query=""):
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            raise InvalidError(f"not an absolute path: {path!r}", status=400, error="invalid",
                               code="invalid_path")
        return f"/contexts/{_q(_id(context))}/files?path={_q(path, '/')}{query}"

    def write_path(self, context, path, data) -> FileEntry:
        """Writes a file anywhere in the sandbox (parents created, replaced
        atomically); `data` as for upload, streamed.  Returns its entry."""
        headers = {"Content-Type": "application/octet-stream"}
        data = _body(data, headers)
        with self._open("PUT", self._anywhere(context, path), data, headers=headers) as r:
            return FileEntry.from_json(json.loads(r.read() or b"{}"))

    def read_path(self, context, path) -> bytes:
        """A file's bytes from anywhere in the sandbox.  A directory raises
        IsADirectoryError."""
        with self._open("GET", self._anywhere(context, path), headers={"Accept": "*/*"}) as r:
            data = r.read()
            ctype = r.headers.get("Content-Type", "")
        if ctype.startswith("application/json") and _is_listing(data, path, absolute=True):
            raise IsADirectoryError(path)
        return data

    def stat_path(self, context, path) -> FileEntry:
        """The entry of a path (a symlink is described, not followed)."""
        return FileEntry.from_json(self._json("GET", self._anywhere(context, path, "&stat=1")))

    def list_path(self, context, path, depth=1) -> List[FileEntry]:
        """A directory's entries (`depth` levels, 1 to 64), sorted by path.
        A file raises NotADirectoryError."""
        doc = self._json("GET", self._anywhere(context, path, f"&depth={int(depth)}"))
        if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
            raise NotADirectoryError(path)
        return [FileEntry.from_json(e) for e in doc["entries"]]

    def remove_path(self, context, path):
        """Removes a file, a link, or a directory with everything in it."""
        self._json("DELETE", self._anywhere(context, path))

    def make_dir(self, context, path) -> FileEntry:
        """Creates a directory and its parents (an existing one is fine)."""
        self._anywhere(context, path)
        return FileEntry.from_json(self._json(
            "POST", f"/contexts/{_q(_id(context))}/files/mkdir", {"path": path}))

    def move_path(self, context, src, dst) -> FileEntry:
        """Renames src to dst (what was at dst is replaced, its parents
        created); returns the entry at dst."""
        self._anywhere(context, src)
        self._anywhere(context, dst)
        return FileEntry.from_json(self._json(
            "POST", f"/contexts/{_q(_id(context))}/files/move", {"from": src, "to": dst}))

    def health(self):
        """GET /health: {"status": "ok"}, and with an admin's key the
        version, replica and kernel counts too."""
        return self._json("GET", "/health")


def _q(s, safe=""):
    return urllib.parse.quote(s, safe=safe)


def _body(data, headers):
    """An upload's body: bytes, or a file object streamed (its length in
    headers when it has one)."""
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        try:
            headers["Content-Length"] = str(os.fstat(data.fileno()).st_size - data.tell())
        except (OSError, AttributeError, ValueError):
            return data.read()
    return data


def _is_listing(data, path, absolute=False):
    """Whether a GET's JSON answer is sandgate's directory listing for path
    (a workspace path, or an absolute one)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return False
    want = path if absolute else path.strip("/")
    return isinstance(doc, dict) and isinstance(doc.get("entries"), list) and \
        doc.get("path") == want
