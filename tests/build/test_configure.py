"""configure names the Debian package to install when a dependency is missing.

Runs the real configure script with a pkg-config search path holding every
.pc file of this machine except one dependency's, for each dependency, in a
build directory of its own (from a shadow of the source tree when that was
configured in place: tests/lib/srctree.py)."""
import glob
import os
import shutil
import subprocess
import tempfile

from srctree import unconfigured
from tap import ok, done

SRC = os.environ.get("SG_SRCDIR", ".")
DEPS = {"libzmq": "libzmq3-dev", "libczmq": "libczmq-dev", "libsodium": "libsodium-dev",
        "jansson": "libjansson-dev", "libmicrohttpd": "libmicrohttpd-dev"}
pcs = [p for d in ("/usr/lib/x86_64-linux-gnu/pkgconfig", "/usr/lib/pkgconfig",
                   "/usr/share/pkgconfig") for p in glob.glob(d + "/*.pc")]

for module, package in DEPS.items():
    with tempfile.TemporaryDirectory(prefix="sg-conf-") as tmp:
        pcdir = os.path.join(tmp, "pc")
        os.mkdir(pcdir)
        for p in pcs:
            if os.path.basename(p) != module + ".pc":
                shutil.copy(p, pcdir)
        env = dict(os.environ, PKG_CONFIG_LIBDIR=pcdir, PKG_CONFIG_PATH="")
        build = os.path.join(tmp, "build")
        os.mkdir(build)
        src = unconfigured(SRC, tmp)
        r = subprocess.run([os.path.join(src, "configure"), "-q"], cwd=build, env=env,
                           capture_output=True, text=True)
        ok(r.returncode != 0 and f"apt-get install {package}" in r.stderr,
           f"without {module}.pc configure fails and names {package}", r.stderr[-400:])
done()
