"""docker/k8s: every manifest is a valid Kubernetes object (strict schemas
of two releases, unknown fields refused: kubernetes-validate from PyPI, in
tests/.venv), and the pieces fit together — the StatefulSet's pods get their
replica id from their name, probe /health, pause on stop within the grace
period, keep state on a claim, take the admin's key from one Secret and the
tenants' keys file from another, mounted read-only, mode 0400, owned by root
(a copy of what the kubelet makes of it is one sandgate accepts, and the same
with the default mode 0644 is refused); the headless Service, the PDB and the
NetworkPolicies select those pods; the proxy's config routes to each
replica's DNS name.  No cluster needed."""
import glob
import json
import os
import shutil
import subprocess
import tempfile

from tap import ok, diag, done

SRC = os.environ.get("SG_SRCDIR", ".")
SANDGATE = os.path.join(os.environ.get("SG_BUILDDIR", "."), "sandgate")
K8S = os.path.join(SRC, "docker", "k8s")
VENV = os.path.join(SRC, "tests", ".venv", "bin")
VERSIONS = ("1.28.0", "1.33.0")


def validate(files, version):
    return subprocess.run([os.path.join(VENV, "kubernetes-validate"), "--strict", "--no-warn",
                           "-k", version, *files], capture_output=True, text=True, timeout=300)


def load(files):
    """Every document of the files, parsed by PyYAML in the venv."""
    code = ("import json, sys, yaml\n"
            "print(json.dumps([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]))")
    r = subprocess.run([os.path.join(VENV, "python"), "-c", code, *files],
                       capture_output=True, text=True, timeout=60, check=True)
    return json.loads(r.stdout)


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).get("matchLabels", {}).items())


if not os.path.exists(os.path.join(VENV, "kubernetes-validate")):
    ok(False, "tests/.venv has kubernetes-validate (run scripts/venv.sh)")
    done()
    raise SystemExit

files = sorted(f for f in glob.glob(os.path.join(K8S, "*.yaml"))
               if os.path.basename(f) != "kustomization.yaml")
ok(len(files) >= 6, f"docker/k8s has the manifests ({len(files)} files)",
   [os.path.basename(f) for f in files])
for v in VERSIONS:
    r = validate(files, v)
    ok(r.returncode == 0, f"all of them are valid against Kubernetes {v}, strictly",
       r.stdout[-3000:] + r.stderr[-2000:])

# The validator is not vacuous: a misspelt field fails.
tmp = tempfile.mkdtemp(prefix="sgt-k8s-")
try:
    bad = os.path.join(tmp, "statefulset.yaml")
    with open(os.path.join(K8S, "statefulset.yaml")) as f:
        text = f.read()
    with open(bad, "w") as f:
        f.write(text.replace("  serviceName: sandgate", "  serviceNam: sandgate", 1))
    r = validate([bad], VERSIONS[-1])
    ok(r.returncode != 0 and "serviceNam" in r.stdout + r.stderr,
       "a misspelt field (serviceNam) is refused", r.stdout[-800:])
finally:
    shutil.rmtree(tmp, ignore_errors=True)

docs = load(files)
kinds = {}
for d in docs:
    kinds.setdefault(d["kind"], []).append(d)
need = ["Namespace", "Secret", "Service", "StatefulSet", "PodDisruptionBudget", "NetworkPolicy",
        "Deployment", "ConfigMap"]
ok(all(k in kinds for k in need), "a Namespace, Secret, Services, StatefulSet, PDB, "
   "NetworkPolicies, the proxy's Deployment and ConfigMap", sorted(kinds))
ns = kinds.get("Namespace", [{}])[0].get("metadata", {}).get("name")
ok(all(d["metadata"].get("namespace") == ns for d in docs if d["kind"] != "Namespace"),
   f"everything is in namespace {ns}")

sts = kinds["StatefulSet"][0]
spec = sts["spec"]
pod = spec["template"]["spec"]
c = pod["containers"][0]
env = {e["name"]: e for e in c.get("env", [])}
labels = spec["template"]["metadata"]["labels"]
ok(selects(spec["selector"], labels), "the StatefulSet's selector matches its pods")
ok(env.get("SANDGATE_REPLICA_ID", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
   == "metadata.name", "each pod's replica id is its name (sandgate-N)", env.get("SANDGATE_REPLICA_ID"))
ok(env.get("SANDGATE_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("name")
   in [s["metadata"]["name"] for s in kinds["Secret"]], "the token comes from the Secret")
ok(env.get("SANDGATE_LISTEN", {}).get("value", "").startswith("0.0.0.0:"),
   "sandgate listens on the pod's address", env.get("SANDGATE_LISTEN"))
port = int(env["SANDGATE_LISTEN"]["value"].rsplit(":", 1)[1])
ok(any(p["containerPort"] == port for p in c["ports"]), "the container port is the one it listens on")
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    ok(c.get(probe, {}).get("httpGet", {}).get("path") == "/health",
       f"{probe} asks /health (no token needed)", c.get(probe))
pause = int(env.get("SANDGATE_PAUSE_ON_STOP", {}).get("value", "0"))
grace = pod.get("terminationGracePeriodSeconds", 30)
ok(0 < pause < grace, f"a stop pauses the sessions first ({pause} s), within the grace "
   f"period ({grace} s)", (pause, grace))
ok("preStop" not in c.get("lifecycle", {}),
   "no preStop delay: the drain answers GET /health 503 at SIGTERM, which takes the replica "
   "out of the proxy (a preStop would only hold the pod serving)")
state = env.get("SANDGATE_STATE_DIR", {}).get("value")
mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
claims = [t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])]
ok(state and mounts.get(state) in claims, "the state directory is a volume claim per replica",
   (state, mounts, claims))

# --- the tenants' keys file: a Secret mounted read-only --------------------------------
secrets = {s["metadata"]["name"]: s for s in kinds["Secret"]}
vols = {v["name"]: v for v in pod.get("volumes", [])}
keys_path = env.get("SANDGATE_KEYS_FILE", {}).get("value", "")
kmount = next((m for m in c.get("volumeMounts", [])
               if keys_path.startswith(m["mountPath"].rstrip("/") + "/")), None)
kvol = vols.get(kmount["name"], {}).get("secret", {}) if kmount else {}
kname = kvol.get("secretName")
kfile = os.path.relpath(keys_path, kmount["mountPath"]) if kmount else None
ok(kmount and kvol and kname in secrets and kname != env["SANDGATE_TOKEN"]["valueFrom"]
   ["secretKeyRef"]["name"], "--keys-file (SANDGATE_KEYS_FILE) is a file of a Secret volume of "
   "its own, beside the admin's --token", (keys_path, kmount, kvol))
ok(kmount and kmount.get("readOnly") is True and not kmount.get("subPath"),
   "mounted read-only, without subPath (so the kubelet's updates reach it)", kmount)
ok(kvol.get("defaultMode") == 0o400 and not kvol.get("items"),
   "its files are mode 0400", kvol)
ok("fsGroup" not in pod.get("securityContext", {}) and "runAsUser" not in c.get("securityContext", {}),
   "no fsGroup or runAsUser: the kubelet's files are root's, as sandgate wants", pod.get("securityContext"))
data = dict(secrets.get(kname, {}).get("stringData", {}))
ok(kfile in data, f"the Secret {kname} has the file SANDGATE_KEYS_FILE names ({kfile})",
   sorted(data))


def kubelet_volume(root, files, mode):
    """A Secret volume as the kubelet writes it: the files in a timestamped
    directory, ..data a link to it, each name a link through ..data."""
    stamp = os.path.join(root, "..2026_01_01_00_00_00.000000001")
    os.makedirs(stamp)
    for name, text in files.items():
        with open(os.path.join(stamp, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(stamp, name), mode)
        os.symlink(os.path.join("..data", name), os.path.join(root, name))
    os.symlink(os.path.basename(stamp), os.path.join(root, "..data"))


tmp = tempfile.mkdtemp(prefix="sgt-k8s-keys-")
try:
    os.chmod(tmp, 0o711)
    vol = os.path.join(tmp, "mounted")
    kubelet_volume(vol, data, kvol.get("defaultMode", 0o644))
    r = subprocess.run([SANDGATE, "keys", "list", "--keys-file", os.path.join(vol, kfile or "")],
                       capture_output=True, text=True, timeout=60)
    ok(r.returncode == 0, "sandgate reads the shipped keys file as the kubelet mounts it "
       "(a placeholder without tenants)", r.stdout + r.stderr)
    made = os.path.join(tmp, "made")
    add = subprocess.run([SANDGATE, "keys", "add", "alice", "--keys-file", made],
                         capture_output=True, text=True, timeout=60)
    vol2 = os.path.join(tmp, "rotated")
    with open(made) as f:
        kubelet_volume(vol2, {kfile or "keys": f.read()}, kvol.get("defaultMode", 0o644))
    r = subprocess.run([SANDGATE, "keys", "list", "--keys-file", os.path.join(vol2, kfile or "")],
                       capture_output=True, text=True, timeout=60)
    ok(add.returncode == 0 and r.returncode == 0 and "alice" in r.stdout,
       "a file from `sandgate keys add`, put in the Secret, is read through the mount",
       add.stderr + r.stdout + r.stderr)
    vol3 = os.path.join(tmp, "default-mode")
    kubelet_volume(vol3, data, 0o644)
    r = subprocess.run([SANDGATE, "keys", "list", "--keys-file", os.path.join(vol3, kfile or "")],
                       capture_output=True, text=True, timeout=60)
    ok(r.returncode != 0 and "0644" in r.stderr,
       "without defaultMode (0644) sandgate would refuse it: the mode matters", r.stderr)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sc = c.get("securityContext", {})
ok(sc.get("privileged") is True and sc.get("seccompProfile", {}).get("type") == "Unconfined",
   "privileged, seccomp Unconfined (nested runsc: docker/README.md)", sc)

svc = next(s for s in kinds["Service"] if s["metadata"]["name"] == spec["serviceName"])
ok(svc["spec"].get("clusterIP") == "None" and selects({"matchLabels": svc["spec"]["selector"]},
                                                      labels),
   "the StatefulSet's Service is headless and selects its pods (stable DNS per replica)")
pdb = kinds["PodDisruptionBudget"][0]
ok(selects(pdb["spec"]["selector"], labels) and pdb["spec"].get("maxUnavailable") == 1,
   "the PDB lets one replica go at a time")
nps = {n["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/name"): n
       for n in kinds["NetworkPolicy"]}
rep = nps.get(labels["app.kubernetes.io/name"])
ok(rep and "Ingress" in rep["spec"]["policyTypes"] and
   all(f.get("podSelector") for r in rep["spec"]["ingress"] for f in r.get("from", [])),
   "replicas take traffic from the proxy's pods only")
blocked = [x for r in (rep or {}).get("spec", {}).get("egress", [])
           for t in r.get("to", []) for x in t.get("ipBlock", {}).get("except", [])]
ok("169.254.0.0/16" in blocked and "10.0.0.0/8" in blocked,
   "their egress never reaches the metadata service or private ranges", blocked)

dep = kinds["Deployment"][0]
dpod = dep["spec"]["template"]
ok(nps.get(dpod["metadata"]["labels"].get("app.kubernetes.io/name")),
   "the proxy's pods have a NetworkPolicy of their own")
ok(any(selects({"matchLabels": f.get("podSelector", {}).get("matchLabels", {})},
               dpod["metadata"]["labels"]) for r in rep["spec"]["ingress"] for f in r["from"]),
   "and are the ones the replicas take traffic from")
cm = next(m for m in kinds["ConfigMap"]
          if any(v.get("configMap", {}).get("name") == m["metadata"]["name"]
                 for v in dpod["spec"].get("volumes", [])))
cfg = cm["data"]["haproxy.cfg"]
for i in range(spec["replicas"]):
    name = f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}.{ns}.svc.cluster.local:{port}"
    ok(name in cfg, f"the proxy's config routes to replica {i} by its DNS name", name)
ok(f"{sts['metadata']['name']}-{spec['replicas']}." not in cfg,
   "and to no replica the StatefulSet does not have")
ok("resolvers" in cfg and "init-addr" in cfg,
   "it resolves the replicas at run time (a pod not up yet does not stop the proxy)")
tmp = tempfile.mkdtemp(prefix="sgt-k8s-")
try:
    for key, text in cm["data"].items():  # where the Deployment mounts them
        with open(os.path.join(tmp, key), "w") as f:
            f.write(text.replace("/usr/local/etc/haproxy/", tmp + "/"))
    path = os.path.join(tmp, "haproxy.cfg")
    r = subprocess.run(["haproxy", "-c", "-f", path], capture_output=True, text=True, timeout=60)
    ok(r.returncode == 0, "HAProxy 2.6 accepts the proxy's config (haproxy -c)",
       r.stdout[-1500:] + r.stderr[-1500:])
finally:
    shutil.rmtree(tmp, ignore_errors=True)
r = subprocess.run([os.path.join(K8S, "proxy-config.sh"), "--replicas", str(spec["replicas"]),
                    "--namespace", ns], capture_output=True, text=True, timeout=60)
with open(os.path.join(K8S, "proxy.yaml")) as f:
    shipped = f.read()
ok(r.returncode == 0 and r.stdout == shipped,
   "proxy.yaml is what proxy-config.sh makes for the StatefulSet's replicas (no drift)",
   r.stderr[-500:])
done()
