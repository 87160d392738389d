"""Exceptions: one class per `error` value of sandgate's error table
(docs/api.md, "Errors"), all under SandgateError."""


class SandgateError(Exception):
    """Anything that went wrong talking to sandgate.  `status` is the HTTP
    status (None when there was no answer), `error` sandgate's error kind
    (e.g. "not_found"), `message` its explanation."""

    error = None

    def __init__(self, message, status=None, error=None):
        super().__init__(message)
        self.message = message
        self.status = status
        if error is not None:
            self.error = error

    def __str__(self):
        if self.status is None:
            return self.message
        return f"{self.status} {self.error or 'error'}: {self.message}"


class SandgateConnectionError(SandgateError):
    """sandgate could not be reached, or the connection broke."""

    error = "connection"


class ProtocolError(SandgateError):
    """sandgate answered something this client does not understand."""

    error = "protocol"


class InvalidError(SandgateError):
    """400: malformed or contradictory input, a path with `..`."""

    error = "invalid"


class UnauthorizedError(SandgateError):
    """401: a missing or wrong token."""

    error = "unauthorized"


class ForbiddenError(SandgateError):
    """403: a file path through a symbolic link, or not a file or directory."""

    error = "forbidden"


class NotFoundError(SandgateError):
    """404: an unknown context, file or route."""

    error = "not_found"


class MethodNotAllowedError(SandgateError):
    """405."""

    error = "method_not_allowed"


class ConflictError(SandgateError):
    """409: e.g. pausing a busy context, a full queue, an upload onto a directory."""

    error = "conflict"


class LimitExceededError(SandgateError):
    """413: a body, upload, workspace or the number of kernels past its limit."""

    error = "limit_exceeded"


class InsufficientStorageError(SandgateError):
    """507: a pause whose checkpoint the disk could not hold."""

    error = "insufficient_storage"


class UnavailableError(SandgateError):
    """503: a kernel could not start, a pause or resume failed."""

    error = "unavailable"


class GatewayTimeoutError(SandgateError):
    """504: sandgate's privileged launcher did not answer in time."""

    error = "timeout"


ERRORS = {c.error: c for c in (InvalidError, UnauthorizedError, ForbiddenError, NotFoundError,
                                MethodNotAllowedError, ConflictError, LimitExceededError,
                                InsufficientStorageError, UnavailableError, GatewayTimeoutError)}
_BY_STATUS = {400: InvalidError, 401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError,
              405: MethodNotAllowedError, 409: ConflictError, 413: LimitExceededError,
              503: UnavailableError, 504: GatewayTimeoutError, 507: InsufficientStorageError}


def from_response(status, body):
    """The exception for an error response: by its `error` field, else by
    its status (a proxy in front of sandgate may answer in its own words)."""
    import json

    kind, message = None, None
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            kind, message = doc.get("error"), doc.get("message")
    except ValueError:
        pass
    if not isinstance(message, str):
        message = body.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    cls = ERRORS.get(kind) or _BY_STATUS.get(status) or SandgateError
    return cls(message, status=status, error=kind if isinstance(kind, str) else None)
