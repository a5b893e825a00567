#!/bin/sh
# check.sh HEAPBUGS_EXE CASE SAFETY_BOX OUTCOME
#
# Runs `HEAPBUGS_EXE CASE` with HAKMEM_SAFETY=SAFETY_BOX under
# HAKMEM_ON_ERROR=abort and warn, and checks the outcome the box must give
# (tests/heapbugs/meson.build):
#   caught : abort: killed by SIGABRT, exactly one "hakmem: error: " line on
#            stderr naming the call and pointer the program printed
#            ("call: ...") and the reason it expects ("expect: ...");
#            warn: exit 0, "survived" printed, the same single line
#   missed : exit 0, "survived", no "hakmem: error" line (the bug goes unseen)
#   fresh  : exit 0, "read: fresh" (a read after free saw hakmem's bytes,
#            not the program's), no report
#   fault  : killed by SIGSEGV (a guard page), "no fault" never printed
#   any    : the program reached the bug (its "call:", "read:" or "write:"
#            line); what follows is not checked (a box that misses it)
# Prints one verdict line per mode; exits 1 if any mode failed.
set -u
. "$(dirname "$0")/../expect-report.sh"

exe=$1 case=$2 box=$3 outcome=$4
ulimit -c 0 2>/dev/null || true
tmp=$(mktemp -d "${TMPDIR:-/tmp}/heapbugs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

failed=0
for mode in abort warn; do
    HAKMEM_SAFETY=$box HAKMEM_ON_ERROR=$mode "$exe" "$case" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    call=$(sed -n 's/^call: //p' "$tmp/out")
    reason=$(sed -n 's/^expect: //p' "$tmp/out")
    nlines=$(grep -c '^hakmem: error: ' "$tmp/err")
    problem=""

    if ! grep -q '^\(call\|read\|write\): ' "$tmp/out"; then
        problem="the program did not reach the bug (exit status $rc)"
    else
        case $outcome in
        caught)
            expect_report "$mode" ;;
        missed|fresh)
            [ "$rc" -eq 0 ] || problem="exit status $rc, expected 0"
            grep -q '^survived$' "$tmp/out" || problem="${problem:+$problem; }no 'survived'"
            [ "$nlines" -eq 0 ] || problem="${problem:+$problem; }an error was reported"
            if [ "$outcome" = fresh ]; then
                grep -q '^read: fresh$' "$tmp/out" || problem="${problem:+$problem; }the freed block still held the program's bytes"
            fi ;;
        fault)
            # 139 = 128 + SIGSEGV(11); under AddressSanitizer (scripts/sanitize)
            # its SEGV handler reports the fault and exits 1 instead
            if [ "$rc" -ne 139 ] && ! { [ "$rc" -eq 1 ] && grep -q 'AddressSanitizer: SEGV' "$tmp/err"; }; then
                problem="exit status $rc, expected death by SIGSEGV (139)"
            fi
            grep -q '^no fault$' "$tmp/out" && problem="${problem:+$problem; }the overflow ran on without a fault" ;;
        any) ;;
        *) problem="unknown outcome $outcome" ;;
        esac
    fi

    print_verdict
done
exit $failed
