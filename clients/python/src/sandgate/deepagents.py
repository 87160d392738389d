"""A Deep Agents sandbox backend on one sandgate context (needs the
`deepagents` extra: `pip install 'sandgate[deepagents]'`, deepagents 0.2.8 or
later).

    from deepagents import create_deep_agent
    from sandgate.deepagents import SandgateSandbox
    agent = create_deep_agent(model=..., backend=SandgateSandbox(Sandgate()))

BaseSandbox builds ls, read, write, edit, grep and glob on `execute` (a
shell command: sandgate's `command`) and `upload_files`/`download_files`.

The file contract is Deep Agents' (deepagents.backends.protocol): paths are
absolute paths inside the sandbox (`/home/user/...`, `/tmp/...`); anything
else is `invalid_path`, answered before any request.  Failures are the
protocol's strings (`file_not_found`, `is_directory`, `permission_denied`,
`invalid_path`), one per file, never raised.  Contents travel as bytes,
streamed by the files API: never through a command line."""
import posixpath
import shlex
import uuid

try:
    from deepagents.backends.protocol import (ExecuteResponse, FileDownloadResponse,
                                              FileUploadResponse)
    from deepagents.backends.sandbox import BaseSandbox
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("sandgate.deepagents needs Deep Agents: pip install 'sandgate[deepagents]' "
                      f"({e})") from e

from . import (ConflictError, ForbiddenError, InvalidError, NotFoundError, Sandgate,
               SandgateConnectionError, SandgateError)

WORKSPACE = "/home/user"
# A file outside the workspace passes through the workspace's root on its
# way in or out, as a hidden file of its own per transfer, removed after it.
_STAGING = ".sandgate-transfer-"
_MARKER = "[sandgate: output limit of "


class SandgateSandbox(BaseSandbox):
    """One sandgate context as a Deep Agents sandbox.  `context`: an id or a
    Context to use; without one a context is created (`language`, `cwd`,
    `internet`) and `close()` deletes it.  `timeout`: the default seconds
    per command; `max_output`: characters of a command's output kept (None,
    the default: all that sandgate keeps, its --max-output)."""

    def __init__(self, client=None, context=None, *, timeout=None, max_output=None,
                 cwd=None, internet=None):
        self.client = client or Sandgate()
        self.owned = context is None
        if context is None:
            context = self.client.create_context(cwd=cwd, internet=internet)
        self.context_id = context if isinstance(context, str) else context.id
        self.timeout = timeout
        self.max_output = max_output

    @property
    def id(self) -> str:
        return self.context_id

    def close(self):
        if self.owned:
            try:
                self.client.delete_context(self.context_id)
            except SandgateError:
                pass
            self.owned = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def execute(self, command: str, *, timeout: int = None) -> ExecuteResponse:
        """Runs a shell command in the context's sandbox: its output is
        stdout then stderr, its exit code (124 after a timeout) is not
        raised.  `timeout` in seconds (deepagents 0.3+ passes it)."""
        try:
            r = self.client.run_command(command, context=self.context_id,
                                        timeout=timeout if timeout is not None else self.timeout)
        except SandgateError as e:
            return ExecuteResponse(output=f"Error from sandgate: {e}", exit_code=None)
        output = r.stdout
        if r.stderr:
            output += ("" if not output or output.endswith("\n") else "\n") + r.stderr
        if r.error:
            output += ("" if not output or output.endswith("\n") else "\n") + \
                f"{r.error.name}: {r.error.value}"
        truncated = _MARKER in r.stdout or _MARKER in r.stderr
        if self.max_output is not None and len(output) > self.max_output:
            output = output[:self.max_output] + "\n[... output truncated ...]"
            truncated = True
        return ExecuteResponse(output=output, exit_code=r.exit_code, truncated=truncated)

    def upload_files(self, files):
        out = []
        for path, content in files:
            if not _valid(path):
                out.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            try:
                rel = _in_workspace(path)
                if rel is None:
                    error = self._upload_elsewhere(path, bytes(content))
                else:
                    self.client.upload(self.context_id, rel, bytes(content))
                    error = None
            except SandgateConnectionError:
                raise
            except SandgateError as e:
                error = _file_error(e)
            out.append(FileUploadResponse(path=path, error=error))
        return out

    def download_files(self, paths):
        out = []
        for path in paths:
            if not _valid(path):
                out.append(FileDownloadResponse(path=path, error="invalid_path"))
                continue
            try:
                rel = _in_workspace(path)
                if rel is None:
                    content, error = self._download_elsewhere(path)
                elif rel == "":
                    content, error = None, "is_directory"
                else:
                    content, error = self.client.download(self.context_id, rel), None
            except IsADirectoryError:
                content, error = None, "is_directory"
            except SandgateConnectionError:
                raise
            except SandgateError as e:
                content, error = None, _file_error(e)
            out.append(FileDownloadResponse(path=path, content=content, error=error))
        return out

    # Outside the workspace (e.g. /tmp), the bytes pass through a file in
    # the workspace (the files API, streamed) and one short command copies
    # them across, inside the sandbox and as its user: the path is resolved
    # there, with that user's permissions.
    def _upload_elsewhere(self, path, content):
        stage = _STAGING + uuid.uuid4().hex
        self.client.upload(self.context_id, stage, content)
        s, p = shlex.quote(f"{WORKSPACE}/{stage}"), shlex.quote(path)
        r = self.client.run_command(
            f"if [ -d {p} ]; then rm -f {s}; exit 3; fi\n"
            f"mkdir -p -- \"$(dirname -- {p})\" && cp -- {s} {p}\n"
            f"rc=$?; rm -f -- {s}; exit $rc", context=self.context_id)
        if r.exit_code == 0:
            return None
        return "is_directory" if r.exit_code == 3 else _command_error(r.stderr)

    def _download_elsewhere(self, path):
        stage = _STAGING + uuid.uuid4().hex
        s, p = shlex.quote(f"{WORKSPACE}/{stage}"), shlex.quote(path)
        r = self.client.run_command(
            f"if [ -d {p} ]; then exit 3; elif [ ! -e {p} ]; then exit 2; "
            f"elif [ ! -r {p} ] || [ ! -f {p} ]; then exit 4; fi\n"
            f"cp -- {p} {s} || {{ rc=$?; rm -f -- {s}; exit $rc; }}",
            context=self.context_id)
        if r.exit_code != 0:
            error = {2: "file_not_found", 3: "is_directory", 4: "permission_denied"}.get(
                r.exit_code) or _command_error(r.stderr)
            return None, error
        try:
            return self.client.download(self.context_id, stage), None
        finally:
            try:
                self.client.delete_file(self.context_id, stage)
            except SandgateError:
                pass


def _valid(path):
    """Deep Agents' contract: an absolute path, without NUL."""
    return isinstance(path, str) and path.startswith("/") and "\0" not in path


def _in_workspace(path):
    """The workspace-relative path of an absolute `path` sandgate's files
    API can take as it is ('' for the workspace itself), or None for a path
    elsewhere or one with '.', '..' or '//' in it (resolved in the sandbox)."""
    if posixpath.normpath(path) != path.rstrip("/") and path != "/":
        return None
    if path.rstrip("/") == WORKSPACE:
        return ""
    if path.startswith(WORKSPACE + "/"):
        return path[len(WORKSPACE) + 1:]
    return None


def _file_error(e):
    if isinstance(e, NotFoundError):
        return "file_not_found"
    if isinstance(e, ForbiddenError):
        return "permission_denied"
    if isinstance(e, InvalidError):
        return "invalid_path"
    if isinstance(e, ConflictError):
        return "is_directory"
    if "permission denied" in e.message.lower():
        return "permission_denied"
    return str(e)


def _command_error(stderr):
    s = stderr.lower()
    if "no such file" in s:
        return "file_not_found"
    if "permission denied" in s or "read-only" in s or "operation not permitted" in s:
        return "permission_denied"
    if "is a directory" in s:
        return "is_directory"
    if "not a directory" in s:
        return "invalid_path"
    return stderr.strip()[:200] or "failed"
