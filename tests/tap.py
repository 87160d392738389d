"""A minimal TAP producer for sandgate's Python tests (automake's tap-driver reads it)."""
import sys

_n = 0
_failed = 0


def ok(cond, name, detail=None):
    global _n, _failed
    _n += 1
    print(("ok" if cond else "not ok"), _n, "-", name, flush=True)
    if not cond:
        _failed += 1
        if detail is not None:
            for line in str(detail).splitlines():
                print("#  ", line, flush=True)
    return cond


def diag(msg):
    for line in str(msg).splitlines():
        print("#", line, flush=True)


def done():
    print(f"1..{_n}", flush=True)
    sys.exit(1 if _failed else 0)


def skip(name, reason):
    """A check not made, and why (TAP's SKIP directive)."""
    global _n
    _n += 1
    print("ok", _n, "-", name, "# SKIP", reason, flush=True)
