#!/bin/sh
# The HAKMEM_STATS report reaches the user whatever the program does to its
# standard streams, and HAKMEM_STATS_FILE:
#
#   stats-streams.sh PROGRAM LIBHAKMEM
#
# PROGRAM is stats-streams.c. Checks, each with the report on: sort and ls
# (which close stdout and stderr in an atexit handler) and PROGRAM close
# print one report on stderr; PROGRAM fds finds hakmem's descriptor above
# the low numbers and closed on exec; HAKMEM_STATS_FILE with %p gets one
# file per process of PROGRAM fork (named by pid), each with its report and
# nothing on stderr; without %p the reports are appended to one file; a
# file that cannot be opened says so and the report goes to stderr.
set -u
prog=$1 lib=$2
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
reports() { grep -c '^hakmem: stats: ' "$1"; }

printf 'pear\napple\nfig\n' >"$dir/small.txt"
HAKMEM_STATS=1 LD_PRELOAD=$lib sort "$dir/small.txt" >"$dir/out" 2>"$dir/err" || fail "sort failed"
[ "$(cat "$dir/out")" = "$(printf 'apple\nfig\npear')" ] || fail "sort's output: $(cat "$dir/out")"
[ "$(reports "$dir/err")" -eq 1 ] || fail "sort: no report on stderr: $(cat "$dir/err")"

HAKMEM_STATS=1 LD_PRELOAD=$lib ls "$dir" >"$dir/out" 2>"$dir/err" || fail "ls failed"
[ "$(reports "$dir/err")" -eq 1 ] || fail "ls: no report on stderr: $(cat "$dir/err")"

HAKMEM_STATS=1 LD_PRELOAD=$lib "$prog" close >"$dir/out" 2>"$dir/err" || fail "close: exit status $?"
[ "$(reports "$dir/err")" -eq 1 ] || fail "a program that closed stdout and stderr: no report: $(cat "$dir/err")"

out=$(HAKMEM_STATS=1 LD_PRELOAD=$lib "$prog" fds 2>"$dir/err") || fail "fds: $out"
[ "$out" = ok ] || fail "fds: $out"
[ "$(reports "$dir/err")" -eq 1 ] || fail "fds: no report: $(cat "$dir/err")"

pids=$(HAKMEM_STATS_FILE="$dir/st.%p.log" LD_PRELOAD=$lib "$prog" fork 2>"$dir/err") || fail "fork failed"
[ -s "$dir/err" ] && fail "HAKMEM_STATS_FILE set, yet stderr has: $(cat "$dir/err")"
for pid in $pids; do
    [ -f "$dir/st.$pid.log" ] || fail "no file st.$pid.log for process $pid: $(ls "$dir")"
    [ "$(reports "$dir/st.$pid.log")" -eq 1 ] || fail "st.$pid.log: $(cat "$dir/st.$pid.log")"
done
[ "$(ls "$dir" | grep -c '^st\.')" -eq 2 ] || fail "files: $(ls "$dir")"

HAKMEM_STATS_FILE="$dir/all.log" LD_PRELOAD=$lib "$prog" close || fail "close with a file"
HAKMEM_STATS_FILE="$dir/all.log" LD_PRELOAD=$lib "$prog" close || fail "close with a file"
[ "$(reports "$dir/all.log")" -eq 2 ] || fail "two runs did not append two reports: $(cat "$dir/all.log")"

HAKMEM_STATS_FILE="$dir/no/such/dir/x" LD_PRELOAD=$lib "$prog" fds >/dev/null 2>"$dir/err" || fail "fds with a bad file"
grep -q "^hakmem: warning: HAKMEM_STATS_FILE=$dir/no/such/dir/x cannot be opened" "$dir/err" ||
    fail "no warning about a file that cannot be opened: $(cat "$dir/err")"
[ "$(reports "$dir/err")" -eq 1 ] || fail "a bad file: the report did not go to stderr: $(cat "$dir/err")"
echo "reports reached the user"
