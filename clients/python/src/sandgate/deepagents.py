"""A Deep Agents sandbox backend on one sandgate context (needs the
`deepagents` extra: `pip install 'sandgate[deepagents]'`).

    from deepagents import create_deep_agent
    from sandgate.deepagents import SandgateSandbox
    agent = create_deep_agent(model=..., backend=SandgateSandbox(Sandgate()))

BaseSandbox builds ls, read, write, edit, grep and glob on `execute` (a
shell command: sandgate's `command`) and `upload_files`/`download_files`
(sandgate's files API for paths in the workspace, /home/user; a command
for paths elsewhere, such as /tmp)."""
import base64
import shlex

try:
    from deepagents.backends.protocol import (ExecuteResponse, FileDownloadResponse,
                                              FileUploadResponse)
    from deepagents.backends.sandbox import BaseSandbox
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("sandgate.deepagents needs Deep Agents: pip install 'sandgate[deepagents]' "
                      f"({e})") from e

from . import (ConflictError, ForbiddenError, InvalidError, NotFoundError, Sandgate,
               SandgateError)

WORKSPACE = "/home/user"
_MARKER = "[sandgate: output limit of "


class SandgateSandbox(BaseSandbox):
    """One sandgate context as a Deep Agents sandbox.  `context`: an id or a
    Context to use; without one a context is created (`language`, `cwd`,
    `internet`) and `close()` deletes it.  `timeout`: the default seconds
    per command; `max_output`: characters of output kept per command."""

    def __init__(self, client=None, context=None, *, timeout=None, max_output=100_000,
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
        # stdout comes back base64-encoded: BaseSandbox's grep separates its
        # output with NUL bytes, which sandgate's command report (JSON) does
        # not carry (it answers 503).  A subshell, so that `exit` in the
        # command still lets the encoding run.
        wrapped = ('_sgo=$(mktemp) || exit 125\n(\n' + command + '\n) >"$_sgo"\n'
                   '_sgrc=$?\nbase64 -w0 <"$_sgo"; rm -f "$_sgo"; exit $_sgrc\n')
        try:
            r = self.client.run_command(wrapped, context=self.context_id,
                                        timeout=timeout if timeout is not None else self.timeout)
        except SandgateError as e:
            return ExecuteResponse(output=f"Error from sandgate: {e}", exit_code=None)
        output = _unbase64(r.stdout)
        if r.stderr:
            output += ("" if not output or output.endswith("\n") else "\n") + r.stderr
        if r.error:
            output += f"\n{r.error.name}: {r.error.value}"
        truncated = _MARKER in r.stdout or _MARKER in r.stderr
        if self.max_output is not None and len(output) > self.max_output:
            output = output[:self.max_output] + "\n[... output truncated ...]"
            truncated = True
        return ExecuteResponse(output=output, exit_code=r.exit_code, truncated=truncated)

    @staticmethod
    def _relative(path):
        """The workspace-relative path of `path`, or None when it is outside."""
        if not path.startswith("/"):
            return path
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            return path[len(WORKSPACE) + 1:]
        return None

    def upload_files(self, files):
        out = []
        for path, content in files:
            rel = self._relative(path)
            try:
                if rel is None:
                    out.append(self._upload_by_command(path, content))
                    continue
                self.client.upload(self.context_id, rel, content)
                out.append(FileUploadResponse(path=path))
            except SandgateError as e:
                out.append(FileUploadResponse(path=path, error=_file_error(e)))
        return out

    def download_files(self, paths):
        out = []
        for path in paths:
            rel = self._relative(path)
            try:
                if rel is None:
                    out.append(self._download_by_command(path))
                    continue
                out.append(FileDownloadResponse(path=path,
                                                content=self.client.download(self.context_id, rel)))
            except IsADirectoryError:
                out.append(FileDownloadResponse(path=path, error="is_directory"))
            except SandgateError as e:
                out.append(FileDownloadResponse(path=path, error=_file_error(e)))
        return out

    # Outside the workspace (e.g. /tmp): through a command, base64 both ways.
    def _upload_by_command(self, path, content):
        b64 = base64.b64encode(content).decode()
        r = self.client.run_command(
            f"mkdir -p \"$(dirname {shlex.quote(path)})\" && "
            f"printf %s {b64} | base64 -d > {shlex.quote(path)}", context=self.context_id)
        return FileUploadResponse(path=path, error=None if r.exit_code == 0
                                  else _command_error(r.stderr))

    def _download_by_command(self, path):
        q = shlex.quote(path)
        r = self.client.run_command(f"test -d {q} && {{ echo 'Is a directory' >&2; exit 1; }}; "
                                    f"base64 -w0 < {q}", context=self.context_id)
        if r.exit_code != 0:
            return FileDownloadResponse(path=path, error=_command_error(r.stderr))
        return FileDownloadResponse(path=path, content=base64.b64decode(r.stdout))


def _unbase64(text):
    """The command's stdout from its base64 form (what comes before a
    truncation marker); the text as it is when it is not base64."""
    b64 = text.split("\n")[0] if _MARKER in text else text
    try:
        data = base64.b64decode(b64 + "=" * (-len(b64) % 4))
    except ValueError:
        return text
    out = data.decode("utf-8", "replace")
    return out + ("\n[output truncated by sandgate]" if _MARKER in text else "")


def _file_error(e):
    if isinstance(e, NotFoundError):
        return "file_not_found"
    if isinstance(e, ForbiddenError):
        return "permission_denied"
    if isinstance(e, InvalidError):
        return "invalid_path"
    if isinstance(e, ConflictError):
        return "is_directory"
    return str(e)


def _command_error(stderr):
    s = stderr.lower()
    if "no such file" in s:
        return "file_not_found"
    if "permission denied" in s or "read-only" in s:
        return "permission_denied"
    if "is a directory" in s:
        return "is_directory"
    return stderr.strip()[:200] or "failed"
