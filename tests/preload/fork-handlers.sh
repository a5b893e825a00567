#!/bin/sh
# Forks under a preloaded hakmem, and its fork handlers' state:
#
#   fork-handlers.sh PROGRAM LIBHAKMEM HOW EXPECTED [ARG]
#
# Runs PROGRAM (fork-handlers.c) HOW [ARG] with LIBHAKMEM preloaded and
# HAKMEM_STATS=1. Passes when it prints "ok", exits 0, and every stats
# line about fork handlers that reaches stderr (one a process that exits
# through exit) says EXPECTED ("registered"). Command substitution waits
# for every process holding stdout, so a daemon's "ok" is waited for too.
set -u
prog=$1 lib=$2 how=$3 want=$4
shift 4
err=$(mktemp) || exit 1
trap 'rm -f "$err"' EXIT
out=$(HAKMEM_STATS=1 LD_PRELOAD="$lib" "$prog" "$how" "$@" 2>"$err")
status=$?
grep -v '^hakmem: class ' "$err" >&2
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status" >&2; exit 1; }
[ "$out" = ok ] || { echo "FAIL: stdout was '$out'" >&2; exit 1; }
lines=$(grep -c '^hakmem: fork handlers: ' "$err")
[ "$lines" -ge 1 ] || { echo "FAIL: no stats line about fork handlers" >&2; exit 1; }
others=$(grep '^hakmem: fork handlers: ' "$err" | grep -vc "^hakmem: fork handlers: $want\( (\|$\)")
[ "$others" -eq 0 ] || { echo "FAIL: $others lines do not say '$want'" >&2; exit 1; }
echo "$how: fork handlers $want, as expected"
