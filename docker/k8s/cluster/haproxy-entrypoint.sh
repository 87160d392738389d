#!/bin/sh
# The haproxy image's entrypoint, as the official image's: arguments that
# begin with an option run haproxy with them, and haproxy runs in the
# foreground as a master and its worker (-W -db: SIGUSR2 reloads, SIGUSR1
# stops softly); anything else is run as it is (e.g. sh).
set -e
if [ "${1#-}" != "$1" ]; then
    set -- haproxy "$@"
fi
if [ "$1" = haproxy ]; then
    shift
    set -- haproxy -W -db "$@"
fi
exec "$@"
