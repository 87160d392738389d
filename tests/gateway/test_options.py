"""Every option works from every source, because one table drives them all.

--help is generated from gateway/options.c's table; this test reads the
options back out of it and, for each one that takes a value, gives a value
it must refuse on the command line, in its SANDGATE_ variable and in a
config file, and checks each refusal names the option and where the value
came from.  A row missing from one of the four (getopt, --help, the
environment, the config file) fails here.  No daemon starts: a bad value
stops sandgate before it does anything."""
import os
import re
import subprocess
import tempfile

from tap import ok, diag, done

SANDGATE = os.path.join(os.environ.get("SG_BUILDDIR", "."), "sandgate")

def names(err, name, where=""):
    """Whether err refuses --name's value (egress lists explain themselves)."""
    return any(f"{where}--{name}{sep}" in err for sep in (" wants", ": "))


# Values each kind of option refuses ("" for a path: an empty audit log; an
# empty webhook URL or secret).
REFUSED = {"BYTES": "lots", "SEC": "-1", "N": "many", "MIB": "12x", "UID": "0",
           "HOST:PORT": "nonsense", "ID=HOST:PORT...": "nonsense", "MODE": "bogus", "LEVEL": "loud", "ID": "bad id!",
           "TOKEN": "short", "KIB": "fast", "LIST": "not-a-cidr", "IP[,IP]": "not-an-ip",
           "PATH": "", "yes|no": "maybe", "NAME=SPEC": "nameonly", "N|NAME=N": "x=many",
           "TEMPLATE": "https://hub.example.org/lab", "URL": "", "SECRET": "",
           "FILE": "/nonexistent/ca.pem"}

r = subprocess.run([SANDGATE, "--help"], capture_output=True, text=True)
ok(r.returncode == 0, "--help exits 0")
rows = re.findall(r"^  (?:-(\w), )?\s*--([a-z-]+)(?: ([^\s\[]\S*))?(?: \[(SANDGATE_[A-Z_]+)(=1)?\])?$",
                  r.stdout, re.M)
listed = [row[1] for row in rows]
diag(f"{len(rows)} options in --help")
ok(len(rows) >= 40 and "listen" in listed and "audit-code" in listed,
   "--help lists every option, one line each", listed)
for short, name, arg, env, flag in rows:
    if name in ("help", "version", "config"):
        ok(env == "", f"--{name} is for the command line only")
        continue
    want_env = "SANDGATE_" + name.upper().replace("-", "_")
    ok(env == want_env, f"--{name}: --help names {want_env}", env)
    if not arg:  # a flag: its variable and config line take a boolean
        arg, bad = "FLAG", "maybe"
    else:
        bad = REFUSED.get(arg)
        if name in ("runsc", "platform", "rootfs", "state-dir", "preload", "keys-file"):
            continue  # any string; checked where it is used
        if name == "memory":
            bad = "12"
        ok(bad is not None, f"--{name} {arg}: the test knows a bad value")
        if bad is None:
            continue
    # the command line
    if arg != "FLAG":
        c = subprocess.run([SANDGATE, f"--{name}", bad], capture_output=True, text=True)
        ok(c.returncode == 2 and names(c.stderr, name),
           f"--{name} {bad!r} on the command line is refused, naming it", c.stderr)
        if short:
            c = subprocess.run([SANDGATE, f"-{short}", bad], capture_output=True, text=True)
            ok(c.returncode == 2 and names(c.stderr, name), f"-{short} is --{name}",
               c.stderr)
    # the environment
    env_ = dict(os.environ, **{want_env: bad})
    c = subprocess.run([SANDGATE], capture_output=True, text=True, env=env_)
    ok(c.returncode == 2 and names(c.stderr, name, f"{want_env}: "),
       f"{want_env}={bad!r} is refused, naming the variable", c.stderr)
    # the config file
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(f"# sandgate\n{name} = {bad}\n")
    c = subprocess.run([SANDGATE, "-c", f.name], capture_output=True, text=True)
    os.unlink(f.name)
    ok(c.returncode == 2 and names(c.stderr, name, f"{f.name}:2: "),
       f"'{name} = {bad}' in a config file is refused, naming file:line", c.stderr)

# Good values from each source reach the daemon: a combination refused only
# after every option is read (--no-auth off loopback) shows they were applied.
for how, args, env_ in (("command line", ["--listen", "10.0.0.1:0", "--no-auth"], {}),
                        ("environment", [], {"SANDGATE_LISTEN": "10.0.0.1:0",
                                             "SANDGATE_NO_AUTH": "true"})):
    c = subprocess.run([SANDGATE] + args, capture_output=True, text=True,
                       env=dict(os.environ, **env_))
    ok(c.returncode == 2 and "(10.0.0.1)" in c.stderr,
       f"values from the {how} are applied (--no-auth off loopback refused)", c.stderr)

done()
