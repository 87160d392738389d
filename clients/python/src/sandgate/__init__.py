"""sandgate's Python client: stateful code execution in sandboxed Jupyter
kernels over HTTP.  Standard library only; `sandgate.langchain` and
`sandgate.deepagents` need their extras and are imported only when asked for.

    from sandgate import Sandgate
    sg = Sandgate("http://127.0.0.1:49999", api_key)  # or SANDGATE_URL / SANDGATE_API_KEY
    print(sg.execute("6 * 7").text)                   # 42
"""
from .client import (Artifact, CommandResult, Context, Execution, ExecutionError, FileEntry,
                     Result, Sandgate, Snapshot, Template)
from .errors import (ConflictError, ForbiddenError, GatewayTimeoutError, InsufficientStorageError,
                     InvalidError, LimitExceededError, MethodNotAllowedError, NotFoundError,
                     ProtocolError, QuotaExceededError, SandgateConnectionError, SandgateError,
                     TooManyRequestsError, UnauthorizedError, UnavailableError)

__version__ = "0.1.0"

__all__ = [
    "Sandgate", "Context", "Execution", "ExecutionError", "Result", "Artifact", "CommandResult",
    "FileEntry", "Snapshot", "Template", "SandgateError", "SandgateConnectionError",
    "ProtocolError", "InvalidError",
    "UnauthorizedError", "ForbiddenError", "NotFoundError", "MethodNotAllowedError",
    "ConflictError", "LimitExceededError", "QuotaExceededError", "TooManyRequestsError",
    "InsufficientStorageError", "UnavailableError", "GatewayTimeoutError",
]
