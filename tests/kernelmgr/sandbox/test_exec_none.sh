#!/bin/sh
# The command tests (test_exec) again with --sandbox=none (plain processes).
SG_SANDBOX=none exec "$SG_BUILDDIR/tests/kernelmgr/sandbox/test_exec"
