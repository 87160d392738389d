#!/bin/sh
# The kernel lifecycle tests again with --sandbox=none (plain processes).
SG_SANDBOX=none exec "$SG_BUILDDIR/tests/kernelmgr/kernel/test_kernel"
