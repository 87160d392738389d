"""A source directory that a test may configure a build of, out of tree.

automake's configure refuses a second build of a source tree that was
configured in place (`./configure && make check`: "source directory already
configured; run make distclean there first").  unconfigured() hands the
tests a tree configure accepts either way: the source directory itself, or,
when it was configured in place, a shadow of it beside the test's other
files — a symlink to each top-level entry but what configure wrote there."""
import os

# What configure (and config.status) write at the top of the tree.
CONFIGURED = {"config.status", "config.log", "config.h", "stamp-h1", "Makefile"}


def unconfigured(src, tmp):
    """src, or a shadow of it made under tmp (which the caller removes)."""
    src = os.path.abspath(src)
    if not os.path.exists(os.path.join(src, "config.status")):
        return src
    shadow = os.path.join(tmp, "src")
    os.mkdir(shadow)
    for name in os.listdir(src):
        if name not in CONFIGURED:
            os.symlink(os.path.join(src, name), os.path.join(shadow, name))
    return shadow
