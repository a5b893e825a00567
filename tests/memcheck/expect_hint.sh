#!/bin/sh
# Runs a program that does nothing under memcheck with hakmem linked in and
# counts hakmem's start-up hint that memcheck cannot see its blocks:
#   expect_hint.sh VALGRIND PROGRAM COUNT
# COUNT is 1 for a build without -Dvalgrind=enabled, 0 for one with it.
set -u
valgrind=$1 prog=$2 want=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$valgrind" --soname-synonyms=somalloc=nouserintercepts "$prog" nothing >"$log" 2>&1 ||
    { echo "FAIL: the program failed under valgrind:"; cat "$log"; exit 1; }
n=$(grep -c '^hakmem: running under valgrind, but built without -Dvalgrind=enabled' "$log")
[ "$n" -eq "$want" ] || { echo "FAIL: $n hints, want $want:"; cat "$log"; exit 1; }
echo "ok: $n hint(s)"
