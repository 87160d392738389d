#!/usr/bin/python3
"""What moving an idle context to another replica costs (gateway/cluster/),
beside a plain pause and resume of the same context in the same run.

Two sandgates on this host under real runsc, each the other's peer
(--peers).  A context holding some state (--mib MiB of Python objects) is
moved A -> B -> A ... --rounds times; between moves it is paused and resumed
where it is.  Reported, medians:
  move: the server's time (POST /contexts/{id}/move's "ms": pause, snapshot,
        archive, send, start there) and the client's wait from the move's
        request to the first result of an execution on the new replica;
  pause+resume: POST /contexts/{id}/pause, then an execution's first result
        (the restore it wakes), on the same replica.
The ratio is move / pause+resume.

usage: bench/move.py [--rounds N] [--mib N]
  SG_BUILDDIR selects the build (default ./build).  Prints a Markdown table.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
os.environ.setdefault("SG_BUILDDIR", os.path.join(HERE, "..", "build"))
import sgd  # noqa: E402


def first_result(d, cid, code="print(len(state))"):
    lines = d.execute(code, context_id=cid)
    out = "".join(x.get("text", "") for x in lines if x.get("type") == "stdout")
    if not out.strip():
        raise RuntimeError(f"no result: {lines}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--mib", type=int, default=16)
    a = ap.parse_args()
    pa, pb = sgd.free_port(), sgd.free_port()
    d = {"ra": sgd.Daemon("--pool-size", "0", "--replica-id", "ra", "--peers",
                          f"rb=127.0.0.1:{pb}", port=pa),
         "rb": sgd.Daemon("--pool-size", "0", "--replica-id", "rb", "--peers",
                          f"ra=127.0.0.1:{pa}", port=pb)}
    try:
        st, c = d["ra"].json("POST", "/contexts", {})
        cid, here = c["id"], "ra"
        d[here].execute(f"state = bytearray({a.mib} << 20)", context_id=cid)
        server, client, pause = [], [], []
        for _ in range(a.rounds):
            t0 = time.monotonic()
            d[here].json("POST", f"/contexts/{cid}/pause", {})
            first_result(d[here], cid)
            pause.append((time.monotonic() - t0) * 1000)
            there = "rb" if here == "ra" else "ra"
            time.sleep(2)  # the last move's copy has gone from there
            t0 = time.monotonic()
            st, mv = d[here].json("POST", f"/contexts/{cid}/move", {"to": there})
            if st != 200:
                raise RuntimeError(f"move: {st} {mv}")
            first_result(d[there], cid)
            client.append((time.monotonic() - t0) * 1000)
            server.append(mv["ms"])
            here = there
        med = statistics.median
        base = med(pause)
        print(f"# `bench/move.py --rounds {a.rounds} --mib {a.mib}`, real runsc (systrap)\n")
        print(f"One idle context holding {a.mib} MiB, moved between two sandgates on this host "
              f"{a.rounds} times; medians, ms\n")
        print("| | ms | against pause+resume |")
        print("|---|---|---|")
        print(f"| pause + resume (first result), same replica | {base:.0f} | 1.00x |")
        print(f"| move, the server's (pause, snapshot, archive, send, start) | {med(server):.0f} "
              f"| {med(server) / base:.2f}x |")
        print(f"| move, the client's wait to a first result there | {med(client):.0f} "
              f"| {med(client) / base:.2f}x |")
    finally:
        for x in d.values():
            x.stop()


if __name__ == "__main__":
    main()
