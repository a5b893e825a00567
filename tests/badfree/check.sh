#!/bin/sh
# check.sh BADFREE_EXE CASE SAFETY_BOX
#
# Runs `BADFREE_EXE CASE` with HAKMEM_SAFETY=SAFETY_BOX under each
# HAKMEM_ON_ERROR mode and checks:
#   abort  : killed by SIGABRT; stderr has exactly one "hakmem: error: " line,
#            naming the call and pointer the program printed ("call: ...")
#            and the expected reason ("expect: ...")
#   warn   : exit 0, "survived" printed, the same single line on stderr
#   ignore : exit 0, "survived" printed, no "hakmem: error" on stderr
# Prints one verdict line per mode; exits 1 if any mode failed.
set -u
. "$(dirname "$0")/../expect-report.sh"

exe=$1 case=$2 box=$3
ulimit -c 0 2>/dev/null || true
tmp=$(mktemp -d "${TMPDIR:-/tmp}/badfree.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

failed=0
for mode in abort warn ignore; do
    HAKMEM_SAFETY=$box HAKMEM_ON_ERROR=$mode "$exe" "$case" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    call=$(sed -n 's/^call: //p' "$tmp/out")
    reason=$(sed -n 's/^expect: //p' "$tmp/out")
    problem=""

    if [ -z "$call" ]; then
        problem="the program did not reach the bad call"
    elif [ "$mode" = ignore ]; then
        [ "$rc" -eq 0 ] || problem="exit status $rc, expected 0"
        grep -q '^survived$' "$tmp/out" || problem="${problem:+$problem; }no 'survived'"
        grep -q 'hakmem: error' "$tmp/err" && problem="${problem:+$problem; }an error was reported"
    else
        expect_report "$mode"
    fi

    print_verdict
done
exit $failed
