#!/bin/sh
# check.sh DELETE_EXE LIBHAKMEM
#
# C++'s sized and aligned operator delete, exported by libhakmem (see
# api/api.c), under LD_PRELOAD: a program using every form with the right
# sizes runs clean; a delete with a wrong size is reported as free_sized's
# ("does not match the block"): abort kills the program, warn goes on.
set -u
exe=$1 lib=$2
ulimit -c 0 2>/dev/null || true
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cxx.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

LD_PRELOAD=$lib "$exe" clean >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] || grep -q 'hakmem: error' "$tmp/err" || ! grep -qx clean "$tmp/out"; then
    echo "FAIL clean: exit $rc"; sed 's/^/    /' "$tmp/err" | head -n 5; failed=1
else
    echo "ok   clean"
fi

for mode in abort warn; do
    HAKMEM_ON_ERROR=$mode LD_PRELOAD=$lib "$exe" wrong-size >"$tmp/out" 2>"$tmp/err"
    rc=$?
    call=$(sed -n 's/^call: //p' "$tmp/out")
    want=134 survived=no
    [ "$mode" = warn ] && want=0 survived=yes
    problem=""
    [ "$rc" -eq "$want" ] || problem="exit status $rc, expected $want"
    grep -q "^hakmem: error: $call: size 4000 does not match the block" "$tmp/err" ||
        problem="${problem:+$problem; }no report of $call"
    if grep -qx survived "$tmp/out"; then s=yes; else s=no; fi
    [ "$s" = "$survived" ] || problem="${problem:+$problem; }survived: $s"
    if [ -n "$problem" ]; then
        echo "FAIL wrong-size on_error=$mode: $problem"; sed 's/^/    /' "$tmp/err" | head -n 5; failed=1
    else
        echo "ok   wrong-size on_error=$mode"
    fi
done
exit $failed
