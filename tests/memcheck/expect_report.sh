#!/bin/sh
# Runs the buggy program under memcheck with hakmem linked in and checks that
# memcheck reports the expected error (or, for "clean", none at all).
#   expect_report.sh VALGRIND PROGRAM BUG PATTERN
set -u
valgrind=$1 prog=$2 bug=$3 pattern=$4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$valgrind" --soname-synonyms=somalloc=nouserintercepts --leak-check=full \
    --errors-for-leak-kinds=definite --error-exitcode=42 "$prog" "$bug" >"$log" 2>&1
status=$?
if [ "$bug" = clean ]; then
    if [ "$status" -ne 0 ]; then echo "FAIL: memcheck reported errors on a correct program:"; cat "$log"; exit 1; fi
    echo "ok: no report on a correct program"; exit 0
fi
if [ "$status" -ne 42 ] || ! grep -q "$pattern" "$log"; then
    echo "FAIL: memcheck did not report '$pattern' for bug '$bug' (exit $status):"; cat "$log"; exit 1
fi
# hakmem's frames name its library (release build) or its source file
# (builds with debug info)
grep -Eq 'libhakmem|\(api\.c:[0-9]+\)' "$log" ||
    { echo "FAIL: the report does not come from hakmem's allocator:"; cat "$log"; exit 1; }
echo "ok: memcheck reported '$pattern'"
