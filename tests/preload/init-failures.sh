#!/bin/sh
# hakmem when pthread_key_create (at init) and the registration of its fork
# handlers (at the program's first pthread_create) fail:
#
#   init-failures.sh SHIM PROGRAM LIBHAKMEM
#
# Runs PROGRAM (init-failures.c) with SHIM (init-shim.c, which makes both
# calls fail) preloaded after LIBHAKMEM, so that the pthread_key_create
# and __register_atfork (what pthread_atfork calls) hakmem reaches are the
# shim's, which come before libc's. Passes when the
# program exits 0 with "ok" on stdout and hakmem's stderr names both
# failures, once each.
set -u
shim=$1 prog=$2 lib=$3
err=$(mktemp) || exit 1
trap 'rm -f "$err"' EXIT
out=$(LD_PRELOAD="$lib $shim" "$prog" 2>"$err")
status=$?
cat "$err" >&2
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status" >&2; exit 1; }
[ "$out" = ok ] || { echo "FAIL: stdout was '$out'" >&2; exit 1; }
for call in pthread_key_create pthread_atfork; do
    n=$(grep -c "^hakmem: warning: $call failed: " "$err")
    [ "$n" -eq 1 ] || { echo "FAIL: $n warnings about $call (want 1)" >&2; exit 1; }
done
echo "both failures reported; threads, blocks and fork intact"
