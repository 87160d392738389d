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
try:
    from deepagents.backends.protocol import (ExecuteResponse, FileDownloadResponse,
                                              FileUploadResponse)
    from deepagents.backends.sandbox import BaseSandbox
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("sandgate.deepagents needs Deep Agents: pip install 'sandgate[deepagents]' "
                      f"({e})") from e

from . import (ForbiddenError, InvalidError, NotFoundError, Sandgate, SandgateConnectionError,
               SandgateError)

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
        raised.  `timeout` in seconds (newer deepagents pass it; 0.2 does not)."""
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

    # Every path goes through sandgate's files anywhere in the sandbox
    # (docs/api.md, "?path="): streamed both ways, resolved inside the
    # sandbox as its user, the workspace (/home/user) included.
    def upload_files(self, files):
        out = []
        for path, content in files:
            error = "invalid_path"
            if _valid(path):
                try:
                    self.client.write_path(self.context_id, path, bytes(content))
                    error = None
                except SandgateConnectionError:
                    raise
                except SandgateError as e:
                    error = _file_error(e, upload=True)
            out.append(FileUploadResponse(path=path, error=error))
        return out

    def download_files(self, paths):
        out = []
        for path in paths:
            content, error = None, "invalid_path"
            if _valid(path):
                try:
                    content, error = self.client.read_path(self.context_id, path), None
                except IsADirectoryError:
                    error = "is_directory"
                except SandgateConnectionError:
                    raise
                except SandgateError as e:
                    error = _file_error(e, upload=False)
            out.append(FileDownloadResponse(path=path, content=content, error=error))
        return out


def _valid(path):
    """Deep Agents' contract: an absolute path, without NUL."""
    return isinstance(path, str) and path.startswith("/") and "\0" not in path


# sandgate's codes (docs/api.md) as Deep Agents' FileOperationError strings
_CODES = {"not_found": "file_not_found", "is_directory": "is_directory",
          "permission_denied": "permission_denied", "not_regular": "permission_denied",
          "invalid_path": "invalid_path"}


def _file_error(e, upload):
    """The protocol's string for a files request's failure (sandgate's
    message for what the protocol has no string for: a full /tmp, say)."""
    if e.code == "not_directory":   # a file where a parent directory should be
        return "invalid_path" if upload else "file_not_found"
    if e.code in _CODES:
        return _CODES[e.code]
    if isinstance(e, NotFoundError):
        return "file_not_found"
    if isinstance(e, ForbiddenError):
        return "permission_denied"
    if isinstance(e, InvalidError):
        return "invalid_path"
    return str(e)
