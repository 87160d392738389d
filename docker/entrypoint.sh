#!/bin/sh
# The image's entrypoint: makes the loop device nodes that the sessions'
# workspaces need, then becomes sandgate (PID 1) with the arguments given.
#
# Each session's workspace is an ext4 image that the launcher loop-mounts, one
# loop device per session, paused ones included.  The kernel makes loop
# devices on demand (/dev/loop-control), but a container's /dev is a copy of
# the nodes that existed when it started: without a node, the next workspace
# fails with "failed to setup loop device".  So the nodes are made here, up
# to SANDGATE_LOOP_DEVICES (1024; 0: none), where /dev/loop-control is there
# (a privileged container, or one given the device) and a node is missing.
# Outside a container this script is not needed.
set -eu
n=${SANDGATE_LOOP_DEVICES:-1024}
if [ -c /dev/loop-control ] && [ "$n" -gt 0 ]; then
  # loopN's minor is N << part_shift, part_shift being fls(max_part).
  max_part=$(cat /sys/module/loop/parameters/max_part 2>/dev/null || echo 0)
  shift=0
  while [ $((1 << shift)) -le "$max_part" ]; do shift=$((shift + 1)); done
  i=0
  while [ "$i" -lt "$n" ]; do
    if [ ! -e "/dev/loop$i" ] && ! mknod -m 0660 "/dev/loop$i" b 7 $((i << shift)) 2>/dev/null; then
      echo "sandgate-entrypoint: cannot make /dev/loop$i; workspaces are limited to the loop devices there are" >&2
      break
    fi
    i=$((i + 1))
  done
fi
exec /usr/bin/sandgate "$@"
