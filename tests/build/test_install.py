"""make install puts the systemd unit and the example config in place.

- The build tree under test: `make install DESTDIR=...` installs the unit into
  the configured unit dir with every @path@ filled in (ExecStart names the
  installed sandgate), and the example config beside where the unit reads the
  real one; systemd-analyze verify accepts the unit.
- Fresh configures in temporary directories (data files only, nothing to
  compile; from a shadow of the source tree when that was configured in
  place: tests/lib/srctree.py): the default unit dir is systemd's own (pkg-config) or
  /lib/systemd/system, =DIR is honoured, --without-systemdsystemunitdir
  installs no unit but still the example config."""
import os
import re
import shutil
import subprocess
import tempfile

from srctree import unconfigured
from tap import ok, diag, done

SRC = os.path.abspath(os.environ.get("SG_SRCDIR", "."))
BUILD = os.path.abspath(os.environ.get("SG_BUILDDIR", "."))
EXAMPLE = open(os.path.join(SRC, "contrib/sandgate.conf")).read()


def make_var(builddir, name):
    """A variable of builddir's Makefile, fully expanded."""
    # Not as a sub-make of the `make check` running this: an inherited
    # MAKEFLAGS (-j2's jobserver) makes it print its directory.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-",
                        "sg-print"], cwd=builddir, input=f"sg-print:\n\t@echo '$({name})'\n",
                       capture_output=True, text=True, env=env)
    return r.stdout.strip()


def files_under(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def check_unit(text, bindir, sysconfdir, what):
    ok(not re.search(r"@\w+@", text), f"{what}: no @...@ left", text)
    ok(f"\nExecStart={bindir}/sandgate --config {sysconfdir}/sandgate/sandgate.conf "
       "--state-dir /var/lib/sandgate\n" in text, f"{what}: ExecStart names {bindir}/sandgate",
       text)
    for line in ("Type=simple", "KillMode=process", "StateDirectory=sandgate",
                 "Restart=on-failure", f"AssertPathExists={sysconfdir}/sandgate/sandgate.conf"):
        ok(f"\n{line}\n" in text, f"{what}: {line}")
    ok(not re.search(r"^(User|ProtectSystem|ProtectHome|PrivateTmp|PrivateDevices|"
                     r"ReadWritePaths|ReadOnlyPaths|ProtectKernel\w*|ProtectControlGroups|"
                     r"PrivateMounts|MountFlags)=", text, re.M),
       f"{what}: runs as root in the host's mount namespace (no mount-namespace directives)")


with tempfile.TemporaryDirectory(prefix="sg-install-") as tmp:
    # --- the build tree under test -------------------------------------------
    unitdir = make_var(BUILD, "systemdsystemunitdir")
    bindir = make_var(BUILD, "bindir")
    sysconfdir = make_var(BUILD, "sysconfdir")
    dest = os.path.join(tmp, "dest")
    r = subprocess.run(["make", "-s", "install", f"DESTDIR={dest}"], cwd=BUILD,
                       capture_output=True, text=True)
    ok(r.returncode == 0, "make install DESTDIR=... in the build tree", r.stderr[-2000:])
    diag(f"build tree: bindir {bindir}, sysconfdir {sysconfdir}, unit dir {unitdir or '(none)'}")
    example = os.path.join(dest + sysconfdir, "sandgate/sandgate.conf.example")
    ok(os.path.isfile(example) and open(example).read() == EXAMPLE,
       f"example config at {sysconfdir}/sandgate/sandgate.conf.example",
       "\n".join(files_under(dest)))
    ok(os.access(os.path.join(dest + bindir, "sandgate"), os.X_OK), f"{bindir}/sandgate installed")
    unit = os.path.join(dest + unitdir, "sandgate.service")
    if not unitdir:
        diag("the build tree was configured --without-systemdsystemunitdir: no unit to check")
    elif ok(os.path.isfile(unit), f"unit at {unitdir}/sandgate.service",
            "\n".join(files_under(dest))):
        text = open(unit).read()
        check_unit(text, bindir, sysconfdir, "installed unit")
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            diag("SKIP systemd-analyze verify: systemd-analyze is not installed "
                 "(Debian: apt-get install systemd)")
        else:
            # verify checks that ExecStart's program exists: point it at the
            # one in DESTDIR.  Any complaint (even an 'ignoring' one) fails.
            vdir = os.path.join(tmp, "verify")
            os.mkdir(vdir)
            with open(os.path.join(vdir, "sandgate.service"), "w") as f:
                f.write(text.replace(f"ExecStart={bindir}/", f"ExecStart={dest}{bindir}/"))
            r = subprocess.run([analyze, "verify", os.path.join(vdir, "sandgate.service")],
                               capture_output=True, text=True)
            ok(r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(),
               "systemd-analyze verify accepts the unit", r.stdout + r.stderr)

    # --- fresh configures: where the unit goes -------------------------------
    pc = subprocess.run(["pkg-config", "--variable=systemdsystemunitdir", "systemd"],
                        capture_output=True, text=True).stdout.strip()
    cases = [([], pc or "/lib/systemd/system"),
             (["--with-systemdsystemunitdir=/srv/sg-units"], "/srv/sg-units"),
             (["--without-systemdsystemunitdir"], None),
             (["--with-systemdsystemunitdir=no"], None)]
    src = unconfigured(SRC, tmp)
    for i, (flags, want) in enumerate(cases):
        b = os.path.join(tmp, f"b{i}")
        d = os.path.join(tmp, f"d{i}")
        os.mkdir(b)
        args = [os.path.join(src, "configure"), "-q", "--prefix=/opt/sg",
                "--sysconfdir=/etc/sg-test"] + flags
        r = subprocess.run(args, cwd=b, capture_output=True, text=True)
        if not ok(r.returncode == 0, f"configure {' '.join(flags) or '(default)'}",
                  r.stderr[-2000:]):
            continue
        r = subprocess.run(["make", "-s", "install-data", f"DESTDIR={d}"], cwd=b,
                           capture_output=True, text=True)
        ok(r.returncode == 0, "  make install-data DESTDIR=...", r.stderr[-2000:])
        got = files_under(d) if os.path.isdir(d) else []
        units = [f for f in got if f.endswith(".service")]
        if want is None:
            ok(units == [], "  no unit installed", "\n".join(got))
        elif ok(units == [want.lstrip("/") + "/sandgate.service"],
                f"  unit installed at {want}/sandgate.service", "\n".join(got)):
            check_unit(open(os.path.join(d, units[0])).read(), "/opt/sg/bin", "/etc/sg-test",
                       "  unit")
        ok("etc/sg-test/sandgate/sandgate.conf.example" in got, "  example config installed",
           "\n".join(got))
done()
