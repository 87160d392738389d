"""Soak: many sessions executing at once for a while.

32 sessions (SG_SOAK_SESSIONS; 24 under AddressSanitizer) each run short executions back to back from
16 client threads for SG_SOAK_SECONDS (default 15: long runs are bench/soak's, recorded
in docs/security.md).  Every execution prints a token naming its session and
its sequence number and returns a value computed from them: any output lost,
duplicated or delivered to the wrong request fails the test.  sandgate's RSS
is sampled throughout; after the warm-up it must stay flat (a build with
AddressSanitizer keeps freed memory in quarantine, so there it is only
reported).
"""
import concurrent.futures
import json
import os
import subprocess
import threading
import time

from sgd import Daemon, SANDGATE, rss_kib
from tap import ok, diag, done

ASAN = b"libasan" in subprocess.run(["ldd", SANDGATE], capture_output=True).stdout
# Under AddressSanitizer every sandbox start is slower: fewer sessions keep
# the sanitizer run within CI's time, with as many client threads.
SESSIONS = int(os.environ.get("SG_SOAK_SESSIONS", "24" if ASAN else "32"))
SECONDS = float(os.environ.get("SG_SOAK_SECONDS", "15"))
THREADS = 16


d = Daemon("--pool-size", "2", "--max-kernels", str(SESSIONS + 4), "--memory", "256",
           "--idle-timeout", "0")
try:
    t0 = time.time()
    ids = []
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for status, ctx in pool.map(lambda _: d.json("POST", "/contexts", {}, timeout=600),
                                    range(SESSIONS)):
            if status == 201:
                ids.append(ctx["id"])
    ok(len(ids) == SESSIONS, f"{SESSIONS} sessions created", len(ids))
    # Each session's first execution waits for its kernel.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        firsts = list(pool.map(lambda i: d.execute("n = 0", context_id=i, timeout=600), ids))
    ok(all(l[-1]["type"] == "end_of_execution" for l in firsts), "every kernel answers")
    diag(f"{SESSIONS} sessions ready in {time.time() - t0:.0f} s")

    lock = threading.Lock()
    counters = {i: 0 for i in ids}
    busy = {i: False for i in ids}
    problems, done_count = [], [0]
    stop_at = time.time() + SECONDS
    samples = []

    def worker(w):
        k = w
        while time.time() < stop_at:
            with lock:  # one execution per session at a time: its sequence is known
                sid = next((ids[(k + j) % len(ids)] for j in range(len(ids))
                            if not busy[ids[(k + j) % len(ids)]]), None)
                if sid is None:
                    time.sleep(0.01)
                    continue
                busy[sid] = True
                counters[sid] += 1
                seq = counters[sid]
            k += THREADS
            code = (f"n += 1\nprint('{sid}:{seq}')\nimport sys\n"
                    f"print('err:{seq}', file=sys.stderr)\nn * 1000 + {seq}")
            try:
                lines = d.execute(code, context_id=sid, timeout=120)
                out = "".join(l["text"] for l in lines if l["type"] == "stdout")
                err = "".join(l["text"] for l in lines if l["type"] == "stderr")
                res = [l["text"] for l in lines if l["type"] == "result"]
                if out != f"{sid}:{seq}\n" or err != f"err:{seq}\n" or \
                        res != [str(seq * 1000 + seq)]:
                    problems.append((sid, seq, out, err, res))
            except Exception as e:
                problems.append((sid, seq, repr(e)))
            with lock:
                busy[sid] = False
                done_count[0] += 1

    def sampler():
        while time.time() < stop_at:
            samples.append((time.time(), rss_kib(d.proc.pid)))
            time.sleep(max(SECONDS / 30, 0.5))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
    threads.append(threading.Thread(target=sampler))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    samples.append((time.time(), rss_kib(d.proc.pid)))
    ok(not problems, f"{done_count[0]} executions, none lost, duplicated or misattributed",
       problems[:5])
    ok(done_count[0] >= SESSIONS, "every session executed", done_count[0])
    # Flat: the second half of the run grows by less than a small fraction.
    half = samples[len(samples) // 2:]
    grow = half[-1][1] - half[0][1]
    peak = max(s[1] for s in samples)
    diag(f"RSS KiB: start {samples[0][1]}, middle {half[0][1]}, end {half[-1][1]}, peak {peak}; "
         f"{done_count[0] / SECONDS:.0f} executions/s")
    with open(os.environ.get("SG_SOAK_REPORT", "/dev/null"), "w") as f:
        json.dump({"sessions": SESSIONS, "seconds": SECONDS, "executions": done_count[0],
                   "rss_kib": samples, "problems": len(problems), "asan": ASAN}, f)
    if ASAN:
        ok(True, f"RSS in the second half grew by {grow} KiB (AddressSanitizer build: reported "
                 "only)")
    else:
        ok(grow < 8 * 1024, f"RSS is flat in the second half (grew by {grow} KiB)", samples)
    status, health = d.json("GET", "/health")
    ok(status == 200 and health["kernels"]["sessions"] == SESSIONS, "all sessions still alive",
       health)
finally:
    d.stop()
done()
