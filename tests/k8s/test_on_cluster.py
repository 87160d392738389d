"""docker/k8s on a real Kubernetes: the one-node cluster of
docker/k8s/local-cluster.sh (which must be up), tests/k8s/overlay applied
(docker/k8s unchanged but for a 2-core node's requests and local images).
Run by tests/k8s/run.sh, not by `make check` (about half an hour).

In order: 3 replicas Ready; 30 contexts through the proxy's Service, spread
over them, each keeping its variables; the E2B SDK, the MCP SDK,
@jupyterlab/services and JupyterLab 4 in headless Chromium through the
proxy; `kubectl delete pod sandgate-1` (its sessions move to the others
as it stops, and answer with their variables; the others never stop
answering); `kubectl rollout restart` (each replica drains as it stops:
every session keeps its variables, no request fails, the longest a client
waited is measured); scale 3 -> 4 (new contexts reach sandgate-3) and back
(sandgate-3's sessions move to the others first); what a sandbox and a
replica's pod can reach (the API server, the kubelet, the node, another
pod, cloud metadata), with a pod outside the policies as the control.

Figures go to stdout as "# figure NAME VALUE" and to SG_K8S_FIGURES (JSON)."""
import concurrent.futures
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.path.abspath(os.environ.get("SG_SRCDIR", os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))
os.environ["SG_SRCDIR"] = SRC  # absolute: jlab.Lab runs JupyterLab from another cwd
sys.path[:0] = [os.path.join(SRC, "tests", "lib"), os.path.join(SRC, "tests", "clients")]
from sgd import Daemon, TOKEN, stdout  # noqa: E402
from tap import ok, diag, done  # noqa: E402

CLUSTER = os.path.join(SRC, "docker/k8s/local-cluster.sh")
OVERLAY = os.path.join(SRC, "tests/k8s/overlay")
NS = "sandgate"
NODE_IP = "172.30.255.2"
METADATA = "169.254.169.254"
FIGURES = {}


def figure(name, value):
    FIGURES[name] = value
    diag(f"figure {name} {value}")


def kubectl(*args, input=None, timeout=600):
    return subprocess.run([CLUSTER, "kubectl", *args], input=input, capture_output=True,
                          text=True, timeout=timeout)


def k_ns(*args, **kw):
    return kubectl("-n", NS, *args, **kw)


class Proxy:
    """The proxy Service's address, with sgd.Daemon's request helpers."""
    request = Daemon.request
    json = Daemon.json

    def __init__(self, url):
        self.url = url


def execute(p, code, context_id, timeout=120):
    """(status, replica, lines or error document) of an execution through the proxy."""
    try:
        status, hdrs, data = p.request("POST", "/execute",
                                       {"code": code, "context_id": context_id}, timeout=timeout)
    except (OSError, http.client.HTTPException) as e:  # refused, or the stream cut
        return None, None, {"error": "connection", "message": repr(e)}
    replica = hdrs.get("X-Sandgate-Replica")
    if status != 200:
        try:
            return status, replica, json.loads(data)
        except ValueError:
            return status, replica, {"error": None, "body": data[:300]}
    return status, replica, [json.loads(l) for l in data.decode().splitlines() if l.strip()]


def keeps(p, ctx):
    """Whether ctx answers print(v) with its own id (what it set)."""
    status, _, lines = execute(p, "print(v)", ctx)
    return status == 200 and stdout(lines) == ctx + "\n"


class Watch:
    """Threads that run print(v) on contexts in turn for as long as it lasts,
    retrying a 503 (the proxy's answer while a replica is down) as a client
    would: each context's worst wait from a failed request to its next good
    answer, the longest a request took, and anything else than a 503 or a
    good answer, are kept."""

    def __init__(self, p, contexts, threads=4):
        self.p, self.contexts, self.stop_ = p, contexts, threading.Event()
        self.worst, self.bad, self.fails, self.calls = {}, [], 0, 0
        self.longest = 0.0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(contexts[i::threads],))
                        for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, mine):
        down = self.down = {}
        # After finish() is called, on until every context has answered again
        # (the last replica's sessions resume after its rollout is reported).
        end = None
        while not self.stop_.is_set() or (down and time.time() < end):
            if self.stop_.is_set() and end is None:
                end = time.time() + 180
            if not mine:
                time.sleep(0.1)
            for ctx in mine:
                t0 = time.time()
                status, _, lines = execute(self.p, "print(v)", ctx, timeout=300)
                now = time.time()
                with self.lock:
                    self.calls += 1
                    self.longest = max(self.longest, now - t0)
                    if status == 200 and stdout(lines) == ctx + "\n":
                        if ctx in down:
                            wait = now - down.pop(ctx)
                            self.worst[ctx] = max(self.worst.get(ctx, 0), wait)
                    elif status == 503 and isinstance(lines, dict) and lines.get("error"):
                        self.fails += 1
                        down.setdefault(ctx, now)
                    else:
                        self.bad.append((ctx, status, str(lines)[:300]))
                time.sleep(0.05)
        with self.lock:
            for ctx, t0 in down.items():
                self.bad.append((ctx, "still failing at the end", time.time() - t0))

    def finish(self):
        self.stop_.set()
        for t in self.threads:
            t.join()
        return max(max(self.worst.values(), default=0.0), self.longest)


def new_context(p):
    """(id, replica) of a new context, or (None, why)."""
    try:
        status, hdrs, data = p.request("POST", "/contexts", {})
    except (OSError, http.client.HTTPException) as e:
        return None, repr(e)
    if status != 201:
        return None, (status, data[:200])
    return json.loads(data)["id"], hdrs.get("X-Sandgate-Replica")


def wait_service(p, secs=120):
    """Until GET /health answers through the Service (after the proxy rolled,
    kube-proxy's rules follow its new pods within a second or two)."""
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            if p.request("GET", "/health", token=None, timeout=5)[0] == 200:
                return True
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.5)
    return False


def pod_uid(name):
    return k_ns("get", "pod", name, "-o", "jsonpath={.metadata.uid}").stdout


def wait_ready(what, secs):
    t0 = time.time()
    r = k_ns("rollout", "status", what, f"--timeout={secs}s", timeout=secs + 30)
    return r, time.time() - t0


def pod_ip(name, ns=NS):
    return kubectl("-n", ns, "get", "pod", name, "-o", "jsonpath={.status.podIP}").stdout


def reach_code(targets):
    """Python that tries a TCP connection to each (host, port) and prints
    a JSON {"host:port": "open" | the error}."""
    return ("import json, socket\nout = {}\n"
            f"for h, port in {targets!r}:\n"
            "    s = socket.socket(); s.settimeout(3)\n"
            "    try:\n        s.connect((h, port)); out[f'{h}:{port}'] = 'open'\n"
            "    except OSError as e:\n        out[f'{h}:{port}'] = type(e).__name__\n"
            "    finally:\n        s.close()\n"
            "print(json.dumps(out))\n")


started = time.time()
# --- deploy -----------------------------------------------------------------------------------
r = kubectl("kustomize", OVERLAY)
ok(r.returncode == 0 and "kind: StatefulSet" in r.stdout, "kubectl kustomize tests/k8s/overlay",
   r.stderr)
rendered = r.stdout.replace("token: CHANGE-ME", f"token: {TOKEN}")
r = kubectl("apply", "-f", "-", input=rendered)
ok(r.returncode == 0, "kubectl apply: docker/k8s (by the overlay) on the cluster",
   r.stdout + r.stderr)
r, took = wait_ready("statefulset/sandgate", 900)
ok(r.returncode == 0, "the StatefulSet's 3 replicas become Ready (runsc in the pods, "
   "probes passing)", r.stdout + r.stderr + k_ns("get", "pods", "-o", "wide").stdout)
figure("replicas_ready_s", round(took, 1))
r, _ = wait_ready("deployment/sandgate-proxy", 300)
ok(r.returncode == 0, "the proxy's Deployment becomes Ready", r.stdout + r.stderr)
svc = k_ns("get", "svc", "sandgate-proxy", "-o", "jsonpath={.spec.clusterIP}").stdout
p = Proxy(f"http://{svc}:49999")
diag(f"the proxy's Service: {p.url}")
status, health = p.json("GET", "/health", token=None)
ok(status == 200, "GET /health through the Service", (status, health))

# --- 30 contexts over the replicas ------------------------------------------------------------
contexts, placed = [], {}
for _ in range(30):
    ctx, rep = new_context(p)
    if ctx:
        contexts.append(ctx)
        placed[ctx] = rep
ok(len(contexts) == 30, f"30 contexts made through the proxy ({len(contexts)})")
by_replica = {}
for ctx, rep in placed.items():
    by_replica.setdefault(rep, []).append(ctx)
ok(set(by_replica) == {"sandgate-0", "sandgate-1", "sandgate-2"},
   "they are spread over the 3 replicas", {k: len(v) for k, v in by_replica.items()})
with concurrent.futures.ThreadPoolExecutor(6) as pool:
    set_ = list(pool.map(lambda c: execute(p, f"v = {c!r}", c)[0], contexts))
ok(set_ == [200] * 30, "each sets a variable", set_)
with concurrent.futures.ThreadPoolExecutor(6) as pool:
    kept = list(pool.map(lambda c: keeps(p, c), contexts))
ok(all(kept), "each keeps its variable", kept)

# --- real clients through the Service ---------------------------------------------------------
for script, least in (("e2b_sdk.mjs", 15), ("mcp_sdk.mjs", 35)):
    r = subprocess.run(["node", os.path.join(SRC, "tests/lib", script), p.url, TOKEN],
                       capture_output=True, text=True, timeout=900)
    checks = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    checks = [c for c in checks if "ok" in c]
    ok(len(checks) >= least, f"{script} through the cluster ran its checks ({len(checks)})",
       r.stderr[-2000:])
    for c in checks:
        ok(c["ok"], f"{script}: {c['name']}", c.get("detail"))
r = subprocess.run(["node", os.path.join(SRC, "tests/lib/jlab_services.mjs"), p.url, TOKEN,
                    "default"], capture_output=True, text=True, timeout=600)
checks = [l for l in r.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
ok(r.returncode == 0 and len(checks) >= 30,
   f"@jupyterlab/services through the cluster: {len(checks)} checks",
   r.stdout[-2000:] + r.stderr[-2000:])
from jlab import Lab, browse  # noqa: E402
tmp = tempfile.mkdtemp(prefix="sg-k8s-lab-", dir="/tmp")
lab = Lab(tmp, f"--gateway-url={p.url}", f"--GatewayClient.auth_token={TOKEN}",
          "--GatewayClient.request_timeout=180", "--GatewayClient.connect_timeout=90")
try:
    ok(lab.up, "JupyterLab 4 starts with the cluster's proxy as its gateway", lab.output()[-2000:])
    if lab.up:
        shot = os.environ.get("SG_SCREENSHOT", os.path.join(tmp, "lab.png"))
        browse(lab, shot, 9, "python", timeout=600)
finally:
    lab.stop()
    shutil.rmtree(tmp, ignore_errors=True)

# --- a pod deleted ----------------------------------------------------------------------------
victim = "sandgate-1"
theirs = by_replica.get(victim, [])
others = [c for c in contexts if c not in theirs]
watch = Watch(p, others)
old_uid = pod_uid(victim)
t0 = time.time()
r = k_ns("delete", "pod", victim, "--wait=false")
ok(r.returncode == 0, f"kubectl delete pod {victim}", r.stderr)
# Recovery counts from the delete until every one of its sessions answered
# from the new pod (the old one serves them until its SIGTERM).
deadline = time.time() + 600
while time.time() < deadline and pod_uid(victim) in (old_uid, ""):
    time.sleep(0.5)
figure("pod_kill_new_pod_s", round(time.time() - t0, 1))
back = set()
while len(back) < len(theirs) and time.time() < deadline:
    for ctx in theirs:
        if ctx not in back and keeps(p, ctx):
            back.add(ctx)
    time.sleep(0.5)
recovery = time.time() - t0
ok(len(back) == len(theirs) and theirs,
   f"{victim}'s {len(theirs)} sessions answer again with their variables once the pod is back",
   (sorted(set(theirs) - back), k_ns("get", "pods").stdout))
figure("pod_kill_recovery_s", round(recovery, 1))
time.sleep(2)
watch.finish()
ok(watch.fails == 0 and not watch.bad and watch.calls > len(others),
   f"the other replicas' {len(others)} sessions never stopped answering ({watch.calls} "
   "executions)", (watch.fails, watch.bad[:5]))

# --- a rolling restart ------------------------------------------------------------------------
watch = Watch(p, contexts)
t0 = time.time()
r = k_ns("rollout", "restart", "statefulset/sandgate")
ok(r.returncode == 0, "kubectl rollout restart statefulset/sandgate", r.stderr)
r, took = wait_ready("statefulset/sandgate", 1800)
ok(r.returncode == 0, "the rollout completes", r.stdout + r.stderr)
time.sleep(5)
worst = watch.finish()
figure("rollout_s", round(time.time() - t0, 1))
figure("rollout_worst_client_wait_s", round(worst, 1))
figure("rollout_503s", watch.fails)
figure("rollout_executions", watch.calls)
ok(not watch.bad and watch.fails == 0, f"through the rollout every execution answered the "
   f"variable, none failed: each replica's sessions moved as it stopped ({watch.calls} "
   f"executions, {watch.fails} 503s, the longest a client waited {worst:.1f} s)",
   (watch.fails, watch.bad[:5]))
with concurrent.futures.ThreadPoolExecutor(6) as pool:
    kept = list(pool.map(lambda c: keeps(p, c), contexts))
ok(all(kept), "after the rollout every session keeps its variables",
   [c for c, k in zip(contexts, kept) if not k])

# --- scale 3 -> 4 and back --------------------------------------------------------------------
proxy4 = subprocess.run([os.path.join(SRC, "docker/k8s/proxy-config.sh"), "--replicas", "4"],
                        capture_output=True, text=True)
r = kubectl("apply", "-f", "-", input=proxy4.stdout.replace("image: haproxy:2.6",
                                                            "image: haproxy:2.6\n"
                                                            "          imagePullPolicy: Never"))
ok(proxy4.returncode == 0 and r.returncode == 0,
   "proxy-config.sh --replicas 4 applied (the proxy learns sandgate-3)", r.stderr)
r = k_ns("scale", "statefulset/sandgate", "--replicas=4")
r2, _ = wait_ready("statefulset/sandgate", 900)
r3, _ = wait_ready("deployment/sandgate-proxy", 300)
ok(r.returncode == 0 and r2.returncode == 0 and r3.returncode == 0 and wait_service(p),
   "scaled to 4 replicas, the proxy rolled", r.stderr + r2.stderr + r3.stderr)
# The proxy finds the new replica by DNS and its health check: new contexts
# go round the replicas it has found up.
t0, new = time.time(), []
while time.time() - t0 < 120 and not any(rep == "sandgate-3" for _, rep in new):
    new.append(new_context(p))
    time.sleep(0.5)
figure("scale_up_first_context_on_new_replica_s", round(time.time() - t0, 1))
on3 = [c for c, rep in new if rep == "sandgate-3"]
ok(on3, f"new contexts reach the new replica sandgate-3 ({len(new)} made)",
   [rep for _, rep in new])
for ctx, _ in new:
    if ctx:
        execute(p, f"v = {ctx!r}", ctx)
ok(all(c and keeps(p, c) for c, _ in new), "the new contexts run, on whichever replica", new)
# Back to 3: sandgate-3 drains as it stops, its sessions moving to the
# others, which keep them under their ids; the 4-replica proxy stays until
# it has gone.
watch = Watch(p, on3, threads=max(1, min(2, len(on3))))
r = k_ns("scale", "statefulset/sandgate", "--replicas=3")
r2, _ = wait_ready("statefulset/sandgate", 600)
k_ns("wait", "--for=delete", "pod/sandgate-3", "--timeout=300s", timeout=330)
worst = watch.finish()
# Only then the 3-replica proxy (docs/deploy-cluster.md: the proxy that
# knows sandgate-3 holds its sessions' requests while they move).
kubectl("apply", "-f", "-", input=rendered)
wait_ready("deployment/sandgate-proxy", 300)
wait_service(p)
figure("scale_down_503s", watch.fails)
figure("scale_down_worst_client_wait_s", round(worst, 1))
with concurrent.futures.ThreadPoolExecutor(6) as pool:
    kept = list(pool.map(lambda c: keeps(p, c), on3))
ok(r.returncode == 0 and r2.returncode == 0 and on3 and all(kept) and not watch.bad and
   watch.fails == 0, f"scaled back to 3: sandgate-3's {len(on3)} sessions moved to the others "
   f"first, keep their variables, and answered throughout ({watch.calls} executions, "
   f"{watch.fails} failed)", (kept, watch.fails, watch.bad[:5]))
pvc = k_ns("get", "pvc", "state-sandgate-3", "-o", "jsonpath={.status.phase}").stdout
ok(pvc == "Bound", "sandgate-3's volume claim stays (its sessions are on it)", pvc)

# --- what sandboxed code and the pods can reach -----------------------------------------------
other_pod = pod_ip("sandgate-2")
# A proxy pod in service (the Service's ready endpoints; a pod of the last
# rollout may still be going).
proxy_pod = kubectl("-n", NS, "get", "endpointslices", "-l",
                    "kubernetes.io/service-name=sandgate-proxy", "-o",
                    "jsonpath={.items[0].endpoints[?(@.conditions.ready==true)].addresses[0]}"
                    ).stdout.split()[0]
targets = [(NODE_IP, 6443), (NODE_IP, 10250), ("10.96.0.1", 443), ("10.244.0.1", 10250),
           (other_pod, 49999), (proxy_pod, 49999), (METADATA, 80)]
diag(f"targets: {targets}")
ctx = [c for c in contexts if placed[c] == "sandgate-0"][0]
status, _, lines = execute(p, reach_code(targets), ctx)
reach = json.loads(stdout(lines)) if status == 200 and stdout(lines).strip() else {}
ok(reach and "open" not in reach.values(),
   "sandboxed code reaches none of the API server, the kubelet, the node, another pod, "
   "the metadata service", (reach, status, str(lines)[:1000]))
# The pod itself (outside gVisor), under the NetworkPolicies: its peers'
# port is open to it (sessions move that way), nothing else.
r = k_ns("exec", "sandgate-0", "--", "python3", "-c", reach_code(targets))
pod_reach = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}
peer = pod_reach.pop(f"{other_pod}:49999", None)
ok(pod_reach and "open" not in pod_reach.values() and peer == "open",
   "a replica's pod itself reaches none of them but its peer's port (the NetworkPolicies "
   "hold)", (pod_reach, peer, r.stderr[-500:]))
# The control: a pod of the same image outside the policies reaches them,
# so the checks above can fail.
probe = """apiVersion: v1
kind: Pod
metadata: {name: reach-probe, namespace: default}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  containers:
    - name: probe
      image: sandgate:0.1.0
      imagePullPolicy: Never
      command: ["sleep", "600"]
"""
r = kubectl("apply", "-f", "-", input=probe)
kubectl("wait", "--for=condition=Ready", "pod/reach-probe", "--timeout=120s", timeout=150)
r = kubectl("exec", "reach-probe", "--", "python3", "-c", reach_code(targets))
free = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}
ok(free.get(f"{NODE_IP}:6443") == "open" and free.get(f"{METADATA}:80") == "open" and
   free.get(f"{proxy_pod}:49999") == "open",
   "the control: a pod outside the policies reaches the API server, the metadata service "
   "and the proxy's pod", (free, r.stderr[-500:]))
kubectl("delete", "pod", "reach-probe", "--wait=false")

figure("test_s", round(time.time() - started, 1))
if os.environ.get("SG_K8S_FIGURES"):
    with open(os.environ["SG_K8S_FIGURES"], "w") as f:
        json.dump(FIGURES, f, indent=1)
done()
