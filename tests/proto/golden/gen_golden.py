#!/usr/bin/python3
"""Generates golden wire vectors with the reference implementation.

Each vector is a Jupyter message serialised and signed by Debian's
jupyter_client.session.Session, exactly as a kernel or client sends it.
sandgate's tests check that it computes the same signatures and decodes the
same messages (tests/proto/test_golden.c), and that jupyter_client accepts what
sandgate encodes (tests/proto/test_golden_accepted.py).

  gen_golden.py            write vectors.json next to this script
  gen_golden.py --check    exit 1 if vectors.json differs from what
                           jupyter_client produces now
"""
import base64
import json
import os
import sys

from jupyter_client.session import Session
import jupyter_client

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "vectors.json")


def header(msg_type, n, session="c0ffee00-0000-4000-8000-000000000001", username="golden"):
    return {
        "msg_id": f"00000000-0000-4000-8000-{n:012d}",
        "msg_type": msg_type,
        "session": session,
        "username": username,
        "date": f"2026-11-22T05:42:{n:02d}.{n * 1111:06d}Z",
        "version": "5.3",
    }


REQ = header("execute_request", 2)

CASES = [
    dict(name="kernel_info_request", key="sandgate-golden-key-6f1c", identities=[],
         header=header("kernel_info_request", 1), parent_header={}, metadata={}, content={}),
    dict(name="execute_request_unicode", key="sandgate-golden-key-6f1c",
         identities=["a1b2c3"], header=REQ, parent_header={}, metadata={"deletedCells": []},
         content={"code": "x = 'h\u00e9llo \u4e16\u754c \U0001f600'\nprint(x)", "silent": False,
                  "store_history": True, "user_expressions": {}, "allow_stdin": True,
                  "stop_on_error": True}),
    dict(name="execute_result_bundle", key="sandgate-golden-key-6f1c", identities=[],
         header=header("execute_result", 3, session="k-session"), parent_header=REQ,
         metadata={},
         content={"execution_count": 7,
                  "data": {"text/plain": "42", "text/html": "<b>42</b>",
                           "application/json": {"a": [1, 2.5, None, True], "b": {"c": "d"}}},
                  "metadata": {}}),
    dict(name="stream_control_chars", key="sandgate-golden-key-6f1c", identities=[],
         header=header("stream", 4, session="k-session"), parent_header=REQ, metadata={},
         content={"name": "stdout", "text": "tab\tquote\"back\\slash\nnul\u0000bell\u0007\n"}),
    dict(name="status_idle", key="sandgate-golden-key-6f1c", identities=[],
         header=header("status", 5, session="k-session"), parent_header=REQ, metadata={},
         content={"execution_state": "idle"}),
    dict(name="comm_msg_buffers", key="sandgate-golden-key-6f1c", identities=["r1", "r2"],
         header=header("comm_msg", 6), parent_header={}, metadata={},
         content={"comm_id": "c1", "data": {"method": "update", "buffer_paths": [["x"]]}},
         buffers=["AAECAwQ=", "/////w=="]),
    dict(name="long_key_over_block_size", key="k" * 100, identities=[],
         header=header("shutdown_request", 7), parent_header={}, metadata={},
         content={"restart": False}),
    dict(name="error_traceback", key="another key with spaces", identities=[],
         header=header("error", 8, session="k-session"), parent_header=REQ, metadata={},
         content={"ename": "ZeroDivisionError", "evalue": "division by zero",
                  "traceback": ["\u001b[0;31m----\u001b[0m", "ZeroDivisionError: division by zero"]}),
]


def b64(b):
    return base64.b64encode(b).decode("ascii")


def build():
    vectors = []
    for case in CASES:
        s = Session(key=case["key"].encode(), signature_scheme="hmac-sha256")
        msg = {k: case[k] for k in ("header", "parent_header", "metadata", "content")}
        idents = [i.encode() for i in case["identities"]]
        frames = s.serialize(msg, ident=idents)
        frames += [base64.b64decode(b) for b in case.get("buffers", [])]
        v = dict(case)
        v.setdefault("buffers", [])
        v["signature"] = frames[len(idents) + 1].decode("ascii")
        v["frames"] = [b64(f) for f in frames]
        vectors.append(v)
    return {"generator": f"jupyter_client {jupyter_client.__version__} Session.serialize",
            "vectors": vectors}


def main():
    data = json.dumps(build(), indent=1, ensure_ascii=True, sort_keys=True) + "\n"
    if "--check" in sys.argv:
        with open(OUT) as f:
            old = json.load(f)
        new = json.loads(data)
        old.pop("generator"), new.pop("generator")
        if old != new:
            print("vectors.json differs from what jupyter_client produces now", file=sys.stderr)
            sys.exit(1)
        return
    with open(OUT, "w") as f:
        f.write(data)


if __name__ == "__main__":
    main()
