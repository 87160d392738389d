"""Exceptions: one class per `error` value of sandgate's error table
(docs/api.md, "Errors"), all under SandgateError."""


class SandgateError(Exception):
    """Anything that went wrong talking to sandgate.  `status` is the HTTP
    status (None when there was no answer), `error` sandgate's error kind
    (e.g. "not_found"), `message` its explanation."""

    error = None
    # the stable reason of a files request anywhere in the sandbox
    # (docs/api.md: not_found, is_directory, permission_denied, invalid_path...)
    code = None

    def __init__(self, message, status=None, error=None, code=None):
        super().__init__(message)
        self.message = message
        self.status = status
        if error is not None:
            self.error = error
        if code is not None:
            self.code = code

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
    """401: a missing or wrong API key."""

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


class QuotaExceededError(SandgateError):
    """429 `quota_exceeded`: the key's tenant is at one of its quotas.
    `quota` names it (max-contexts, max-live, max-queued, internet:
    docs/api.md) and `limit` is its value; deleting or pausing one of the
    tenant's contexts makes room (for max-queued: one of its executions
    ending)."""

    error = "quota_exceeded"

    def __init__(self, message, status=None, error=None, quota=None, limit=None, code=None):
        super().__init__(message, status=status, error=error, code=code)
        self.quota = quota
        self.limit = limit

    def __str__(self):
        text = super().__str__()
        if self.quota and self.quota not in self.message:
            text += f" (quota {self.quota}, limit {self.limit})"
        return text


class TooManyRequestsError(SandgateError):
    """429 `too_many_requests`: too many failed authentications came from
    this address, so sandgate refuses every request from it for a while
    (--auth-block), even one with a right key.  Waiting helps; a 429 without
    sandgate's body (a proxy's rate limit) is this class too."""

    error = "too_many_requests"


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
                                QuotaExceededError, TooManyRequestsError,
                                InsufficientStorageError, UnavailableError, GatewayTimeoutError)}
_BY_STATUS = {400: InvalidError, 401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError,
              405: MethodNotAllowedError, 409: ConflictError, 413: LimitExceededError,
              429: TooManyRequestsError, 503: UnavailableError, 504: GatewayTimeoutError,
              507: InsufficientStorageError}


def from_response(status, body):
    """The exception for an error response: by its `error` field, else by
    its status (a proxy in front of sandgate may answer in its own words)."""
    import json

    kind, message, doc, code = None, None, None, None
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            kind, message, code = doc.get("error"), doc.get("message"), doc.get("code")
    except ValueError:
        pass
    if not isinstance(message, str):
        message = body.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    cls = ERRORS.get(kind) or _BY_STATUS.get(status) or SandgateError
    e = cls(message, status=status, error=kind if isinstance(kind, str) else None,
            code=code if isinstance(code, str) else None)
    if isinstance(e, QuotaExceededError):
        e.quota, e.limit = doc.get("quota"), doc.get("limit")
    return e
