#!/bin/sh
# Usable memory under an address-space limit (ulimit -v, RLIMIT_AS),
# hakmem against glibc in the same run:
#
#   aslimit.sh LIBHAKMEM PROGRAM SANITIZED CASE
#
# CASE python: python3 builds a list of a million strings under
#   ulimit -v 200000; both runs must succeed.
# CASE blocks / doubling: PROGRAM (aslimit.c) under ulimit -v 2000000
#   prints the MiB of 24,000-byte blocks it got, or the largest size a
#   doubling realloc reached; hakmem's figure must be at least 95% of
#   glibc's. hakmem's own reservations (its tables, alignment slack,
#   caches) must not eat a program's limit.
# Skipped (77) in sanitizer builds, whose runtimes reserve terabytes of
# address space, and under valgrind, whose shadow memory counts.
set -u
lib=$1 prog=$2 sanitized=$3 case=$4
if [ "$sanitized" != none ]; then
    echo "SKIP: sanitizer build ($sanitized): its runtime's reservations exceed any ulimit -v"
    exit 77
fi
if [ -n "${HT_UNDER_VALGRIND:-}" ]; then
    echo "SKIP: under valgrind, whose shadow memory counts against ulimit -v"
    exit 77
fi

if ! LD_PRELOAD=$lib HAKMEM_VERBOSE=1 "$prog" 2>&1 >/dev/null | grep -q '^hakmem:'; then
    echo "FAIL: hakmem did not load from $lib"; exit 1
fi

case $case in
python)
    command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
    code='x = [str(i) for i in range(1000000)]; print(len(x))'
    base=$(sh -c 'ulimit -v 200000 && exec python3 -c "$1"' sh "$code" 2>&1)
    [ "$base" = 1000000 ] || { echo "SKIP: python3 fails under glibc too: $base"; exit 77; }
    hak=$(LD_PRELOAD=$lib sh -c 'ulimit -v 200000 && exec python3 -c "$1"' sh "$code" 2>&1)
    echo "ulimit -v 200000, a million strings: glibc ok, hakmem: $hak"
    [ "$hak" = 1000000 ] || { echo "FAIL: python3 under hakmem failed"; exit 1; }
    ;;
blocks|doubling)
    base=$(sh -c 'ulimit -v 2000000 && exec "$1" "$2"' sh "$prog" "$case") ||
        { echo "FAIL: $case under glibc: exit $?"; exit 1; }
    hak=$(LD_PRELOAD=$lib sh -c 'ulimit -v 2000000 && exec "$1" "$2"' sh "$prog" "$case") ||
        { echo "FAIL: $case under hakmem: exit $?"; exit 1; }
    echo "ulimit -v 2000000, $case: glibc $base MiB, hakmem $hak MiB"
    [ "$base" -gt 0 ] || { echo "FAIL: implausible glibc figure"; exit 1; }
    [ $((hak * 100)) -ge $((base * 95)) ] || { echo "FAIL: hakmem under 95% of glibc"; exit 1; }
    ;;
*)
    echo "unknown case $case"; exit 2 ;;
esac
echo ok
