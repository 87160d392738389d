"""What the client scripts run in a test's virtual environment share: one
JSON line per check, which the test (sgd/tap side) turns into TAP."""
import json


def check(ok, name, detail=None):
    """Prints {ok, name, detail}: detail (its repr, cut at 3000 characters) when not ok."""
    print(json.dumps({"ok": bool(ok), "name": name,
                      "detail": None if ok else repr(detail)[:3000]}), flush=True)


def fails(fn, *args, **kw):
    """The exception fn(*args, **kw) raises, or None."""
    try:
        fn(*args, **kw)
    except Exception as e:  # noqa: BLE001 - the test looks at what it is
        return e
    return None
