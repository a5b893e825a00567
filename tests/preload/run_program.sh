#!/bin/sh
# Run a real program with and without hakmem (LD_PRELOAD) and compare results.
#
#   PRELOAD_LIB=/path/libhakmem.so [HAKMEM_SAFETY=box] run_program.sh NAME
#
# NAME is one of: python3 sort gcc sqlite3 git make
#
# The library path comes from PRELOAD_LIB (falls back to LD_PRELOAD).  The
# driver itself and the baseline runs never have hakmem preloaded; only the
# program under test gets LD_PRELOAD.  All other HAKMEM_* variables
# (HAKMEM_SAFETY, HAKMEM_FRONT, ...) are passed through unchanged.
#
# The test fails when: the program is missing, hakmem did not load (checked
# with HAKMEM_VERBOSE=1: stderr must have a line starting "hakmem:"), any run
# exits non-zero / crashes / times out, the baseline output is implausible, or
# any stdout, stderr, exit status or produced file differs between the runs.
# Exit status: 0 pass, 1 fail.

# shellcheck disable=SC2317,SC2012  # work_* / check_* are called indirectly
set -u

name=${1:-}
so=${PRELOAD_LIB:-${LD_PRELOAD:-}}
unset LD_PRELOAD
box=${HAKMEM_SAFETY:-default}
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
srcdir=${PRELOAD_SRCDIR:-$here}
TIMEOUT_BASE=${PRELOAD_TIMEOUT_BASE:-20}
TIMEOUT_HAK=${PRELOAD_TIMEOUT:-30}

say() { printf '%s\n' "[$name/$box] $*"; }
fail() {
    printf '%s\n' "FAIL [$name/$box]: $*" >&2
    exit 1
}

case $name in
python3 | sort | gcc | sqlite3 | git | make) ;;
*)
    echo "usage: PRELOAD_LIB=libhakmem.so $0 python3|sort|gcc|sqlite3|git|make" >&2
    exit 2
    ;;
esac

[ -n "$so" ] || fail "no library given: set PRELOAD_LIB (or LD_PRELOAD) to libhakmem.so"
[ -f "$so" ] || fail "library '$so' does not exist (build it first)"
so_real=$(readlink -f -- "$so")

# Helper tools (not preloaded). All from coreutils/diffutils/mawk.
for t in awk cmp diff sha256sum mktemp timeout env wc; do
    command -v "$t" >/dev/null 2>&1 ||
        fail "helper tool '$t' not found (run scripts/deps)"
done

# The program under test: missing means FAIL, never a silent pass.
need() {
    p=$(command -v "$1" 2>/dev/null) ||
        fail "program '$1' is not installed; run scripts/deps (installs python3 sqlite3 gcc coreutils git make)"
    printf '%s\n' "$p"
}
case $name in
python3)
    # Prefer the distribution interpreter (installed by scripts/deps) over
    # version-manager shims that may be first in PATH.
    if [ -x /usr/bin/python3 ]; then PROG=/usr/bin/python3; else PROG=$(need python3) || exit 1; fi
    ;;
sort) PROG=$(need sort) || exit 1 ;;
gcc)
    PROG=$(need gcc) || exit 1
    need nm >/dev/null || exit 1 # binutils, comes with gcc
    ;;
sqlite3) PROG=$(need sqlite3) || exit 1 ;;
git) PROG=$(need git) || exit 1 ;;
make)
    PROG=$(need make) || exit 1
    need gcc >/dev/null || exit 1 # the project's compiler (runs under hakmem too)
    need nm >/dev/null || exit 1
    ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-preload-$name.XXXXXX") || fail "mktemp failed"
if [ -n "${PRELOAD_KEEP:-}" ]; then
    trap 'echo "kept $tmp" >&2' EXIT # for debugging the driver
else
    trap 'rm -rf "$tmp"' EXIT
fi
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir "$tmp/base" "$tmp/hak" "$tmp/base/cmp" "$tmp/hak/cmp" "$tmp/in"
export LC_ALL=C

# run MODE SECONDS PREFIX [VAR=value...] CMD [ARGS...]
# MODE base: without hakmem; MODE hak: with LD_PRELOAD=$so.
# Writes PREFIX.out PREFIX.err PREFIX.rc; stdin from $RUN_STDIN (/dev/null).
# Returns non-zero (after saying why) when the command did not exit 0.
run() {
    r_mode=$1 r_secs=$2 r_pfx=$3
    shift 3
    if [ "$r_mode" = hak ]; then
        set -- env LD_PRELOAD="$so" "$@"
    else
        set -- env -u LD_PRELOAD "$@"
    fi
    timeout -k 5 "$r_secs" "$@" <"${RUN_STDIN:-/dev/null}" >"$r_pfx.out" 2>"$r_pfx.err"
    r_rc=$?
    echo "$r_rc" >"$r_pfx.rc"
    RUN_STDIN=/dev/null
    [ "$r_rc" -eq 0 ] && return 0
    if [ "$r_mode" = hak ]; then r_what="under hakmem"; else r_what="without hakmem (baseline)"; fi
    r_step=$(basename "$r_pfx")
    if [ "$r_rc" -eq 124 ] || [ "$r_rc" -eq 137 ]; then
        say "step '$r_step' $r_what: timed out after ${r_secs}s (status $r_rc)"
    elif [ "$r_rc" -gt 128 ]; then
        say "step '$r_step' $r_what: killed by signal $((r_rc - 128)) (status $r_rc)"
    else
        say "step '$r_step' $r_what: exited with status $r_rc"
    fi
    say "  stderr of '$r_step' (first 20 lines):"
    head -n 20 "$r_pfx.err" | sed 's/^/    /'
    return 1
}

# ---------------------------------------------------------------------------
# 1. Is hakmem really loaded into the program?
probe_ok=1
RUN_STDIN=/dev/null
case $name in
python3)
    run hak 15 "$tmp/probe" HAKMEM_VERBOSE=1 "$PROG" -c \
        'import sys; sys.stdout.write(open("/proc/self/maps").read())' || probe_ok=0
    if [ $probe_ok = 1 ] && ! grep -qF -- "$so_real" "$tmp/probe.out"; then
        fail "python3 ran but $so_real is not mapped in /proc/self/maps: LD_PRELOAD did not take effect"
    fi
    ;;
sort) run hak 15 "$tmp/probe" HAKMEM_VERBOSE=1 "$PROG" --version || probe_ok=0 ;;
gcc) run hak 15 "$tmp/probe" HAKMEM_VERBOSE=1 "$PROG" --version || probe_ok=0 ;;
sqlite3) run hak 15 "$tmp/probe" HAKMEM_VERBOSE=1 "$PROG" -version || probe_ok=0 ;;
git) run hak 15 "$tmp/probe" HAKMEM_VERBOSE=1 "$PROG" --version || probe_ok=0 ;;
make) run hak 15 "$tmp/probe" HAKMEM_VERBOSE=1 "$PROG" --version || probe_ok=0 ;;
esac
[ $probe_ok = 1 ] || fail "'$PROG' failed when started with hakmem preloaded (HAKMEM_VERBOSE=1)"
if ! grep -q '^hakmem:' "$tmp/probe.err"; then
    say "stderr of the HAKMEM_VERBOSE=1 run:"
    head -n 20 "$tmp/probe.err" | sed 's/^/    /'
    fail "hakmem was not loaded: with HAKMEM_VERBOSE=1, stderr of '$PROG' has no line starting 'hakmem:'"
fi
say "hakmem loaded ($so_real); its init lines:"
grep '^hakmem:' "$tmp/probe.err" | head -n 12 | sed 's/^/    /'
# When a box was requested and hakmem reports its safety box, it must be that
# one (catches a silent fallback, e.g. mincore requested but not built).
if [ -n "${HAKMEM_SAFETY:-}" ] && grep -q '^hakmem:.*safety' "$tmp/probe.err" &&
    ! grep '^hakmem:.*safety' "$tmp/probe.err" | grep -qw -- "$HAKMEM_SAFETY"; then
    fail "HAKMEM_SAFETY=$HAKMEM_SAFETY requested but hakmem reports: $(grep '^hakmem:.*safety' "$tmp/probe.err" | head -n 3)"
fi

# want DESCRIPTION CMD...: plausibility check of the baseline output.
want() {
    w_what=$1
    shift
    "$@" && return 0
    say "baseline check failed: $w_what"
    return 1
}

# ---------------------------------------------------------------------------
# 2. Inputs (generated once, without hakmem) and the workloads.

gen_sort_input() { # 200000 lines: "key num word text"
    awk 'BEGIN {
        x = 12345; a = "abcdefghijklmnopqrstuvwxyz"
        for (i = 0; i < 200000; i++) {
            x = (x * 69069 + 1) % 4294967296; k = ""
            n = 3 + int(x / 65536) % 10
            for (j = 0; j < n; j++) { x = (x * 69069 + 1) % 4294967296; k = k substr(a, 1 + int(x / 65536) % 26, 1) }
            x = (x * 69069 + 1) % 4294967296; num = int(x / 256) % 1000000 - 500000
            x = (x * 69069 + 1) % 4294967296; w = substr(a, 1 + int(x / 65536) % 20, 1 + int(x / 4096) % 7)
            t = ""; m = int(x / 1024) % 5
            for (j = 0; j < m; j++) t = t " " k j
            printf "%s %d %s%s\n", k, num, w, t
        }
    }' >"$tmp/in/lines.txt"
}

work_sort() { # MODE DIR
    ok=0
    run "$1" "$T" "$2/cmp/sort-plain" "$PROG" "$tmp/in/lines.txt" || ok=1
    mkdir "$2/sorttmp"
    run "$1" "$T" "$2/cmp/sort-keys" "$PROG" -t ' ' -k2,2n -k1,1r -S 512K --parallel=2 \
        -T "$2/sorttmp" "$tmp/in/lines.txt" || ok=1
    run "$1" "$T" "$2/cmp/sort-unique" "$PROG" -u -k3,3 -k1,1 "$tmp/in/lines.txt" || ok=1
    run "$1" "$T" "$2/cmp/sort-rev" "$PROG" -r -f -s -k4 "$tmp/in/lines.txt" || ok=1
    return "$ok"
}
check_sort() { # DIR: plausibility of the baseline
    want "sort-plain has 200000 lines" [ "$(wc -l <"$1/cmp/sort-plain.out")" -eq 200000 ] &&
        want "sort-keys has 200000 lines" [ "$(wc -l <"$1/cmp/sort-keys.out")" -eq 200000 ] &&
        want "sort-plain is sorted (sort -c)" "$PROG" -c "$1/cmp/sort-plain.out" &&
        want "sort-unique is not empty" [ -s "$1/cmp/sort-unique.out" ]
}

gen_c_program() { # a C program with 60 generated functions (about 2 s at -O2)
    awk '
    BEGIN {
        N = 60
        print "#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>"
        print "struct rec { int a; long b; char name[24]; double d; };"
        print "static unsigned long mix(unsigned long h, unsigned long v) { h ^= v + 0x9e3779b97f4a7c15UL + (h << 6) + (h >> 2); return h; }"
        for (i = 0; i < N; i++) {
            m = 8 + i % 17
            printf "unsigned long f%d(int n);\nunsigned long f%d(int n) {\n", i, i
            printf "    int unused_%d = %d;\n", i, i
            printf "    struct rec r[%d]; unsigned long acc = %d; int m = n %% %d + 1;\n", m, i * 31 + 7, m
            printf "    memset(r, 0, sizeof r);\n"
            printf "    for (int k = 0; k < m; k++) { r[k].a = k * %d + n; r[k].b = (long)k * k - %d; r[k].d = k / %d.0;\n", i % 13 + 1, i, i % 7 + 1
            printf "        snprintf(r[k].name, sizeof r[k].name, \"f%d_%%d\", k); }\n", i
            printf "    for (int j = 0; j < n; j++) {\n"
            printf "        struct rec *p = &r[j %% m];\n"
            printf "        switch ((j + %d) %% 5) {\n", i
            printf "        case 0: acc = mix(acc, (unsigned long)p->a); break;\n"
            printf "        case 1: acc += (unsigned long)p->b * %du; break;\n", i % 11 + 3
            printf "        case 2: acc ^= strlen(p->name) << (j %% 13); break;\n"
            printf "        case 3: acc = acc * 6364136223846793005UL + (unsigned long)(p->d * 1000); break;\n"
            printf "        default: acc = (acc >> 3) | (acc << 61); break; }\n"
            printf "    }\n"
            if (i > 0) printf "    if (n > 3) acc = mix(acc, f%d(n / 2));\n", i - 1
            printf "    return acc;\n}\n"
        }
        print "int main(void) {"
        print "    unsigned long total = 0;"
        for (i = 0; i < N; i++) {
            printf "    { unsigned long v = f%d(%d); total = mix(total, v);", i, 20 + i % 40
            if (i % 25 == 0) printf " printf(\"f%d %%lu\\n\", v);", i
            print " }"
        }
        print "    printf(\"checksum %lu\\n\", total);\n    return 0;\n}"
    }
    ' >"$tmp/in/prog.c"
}

work_gcc() { # MODE DIR
    ok=0
    mkdir "$2/tmp"
    # Compile in the shared input directory so file names inside the object
    # are identical; outputs go to DIR.
    (cd "$tmp/in" && run "$1" "$T" "$2/cmp/gcc-compile" \
        TMPDIR="$2/tmp" "$PROG" -O2 -Wall -Wextra -c prog.c -o "$2/cmp/prog.o") || ok=1
    (cd "$tmp/in" && run "$1" "$T" "$2/cmp/gcc-asm" \
        TMPDIR="$2/tmp" "$PROG" -O0 -fverbose-asm -S prog.c -o "$2/cmp/prog.s") || ok=1
    (cd "$2" && run "$1" "$T" "$2/cmp/gcc-link" \
        TMPDIR="$2/tmp" "$PROG" -O2 cmp/prog.o -o cmp/prog) || ok=1
    if [ -f "$2/cmp/prog.o" ]; then
        run base 20 "$2/cmp/nm" nm -S "$2/cmp/prog.o" || ok=1
    fi
    if [ -x "$2/cmp/prog" ]; then # the compiled program runs without hakmem
        run base 20 "$2/cmp/prog-run" "$2/cmp/prog" || ok=1
    fi
    return "$ok"
}
check_gcc() {
    want "prog.o is not empty" [ -s "$1/cmp/prog.o" ] &&
        want "the compiled program printed a checksum" grep -q '^checksum ' "$1/cmp/prog-run.out" &&
        want "nm lists f59" grep -q " T f59$" "$1/cmp/nm.out" &&
        want "gcc -Wall warned about unused_*" grep -q 'unused_' "$1/cmp/gcc-compile.err"
}

gen_sql() { # schema, 50000 INSERT statements, a CTE table, aggregates
    awk 'BEGIN {
        print "PRAGMA cache_size = 100;"
        print "CREATE TABLE people(id INTEGER PRIMARY KEY, name TEXT, city TEXT, age INT, score REAL, note TEXT);"
        print "BEGIN;"
        x = 777; a = "abcdefghijklmnopqrstuvwxyz"
        for (i = 1; i <= 50000; i++) {
            x = (x * 69069 + 1) % 4294967296; n = ""
            m = 3 + int(x / 65536) % 9
            for (j = 0; j < m; j++) { x = (x * 69069 + 1) % 4294967296; n = n substr(a, 1 + int(x / 65536) % 26, 1) }
            x = (x * 69069 + 1) % 4294967296
            printf "INSERT INTO people VALUES(%d,\x27%s\x27,\x27city%02d\x27,%d,%d.%02d,\x27%s\x27);\n", \
                i, n, int(x / 65536) % 37, 1 + int(x / 256) % 90, int(x / 4096) % 1000, int(x / 16) % 100, \
                substr("lorem ipsum dolor sit amet consectetur", 1 + int(x / 128) % 20, 1 + int(x / 8) % 30)
        }
        print "COMMIT;"
        print "CREATE INDEX people_city ON people(city, score);"
        print "CREATE TABLE events AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 50000)"
        print "  SELECT i AS id, (i * 7919) % 50000 + 1 AS person, (i * 104729) % 1000 AS amount,"
        print "         printf(\x27ev-%06d-%s\x27, i, hex(i * 31)) AS label FROM c;"
        print "CREATE INDEX events_person ON events(person);"
        print "SELECT count(*), sum(age), printf(\x27%.4f\x27, avg(score)), min(name), max(name) FROM people;"
        print "SELECT city, count(*), sum(age), printf(\x27%.3f\x27, avg(score)), max(length(name)) FROM people GROUP BY city ORDER BY city;"
        print "SELECT p.city, count(e.id), sum(e.amount), min(e.label) FROM events e JOIN people p ON p.id = e.person GROUP BY p.city ORDER BY 2 DESC, 1;"
        print "SELECT id, name, city, rank() OVER (PARTITION BY city ORDER BY score DESC, id) AS rk FROM people ORDER BY rk, city LIMIT 60;"
        print "SELECT length(group_concat(name, \x27,\x27)), substr(group_concat(name, \x27,\x27), 1, 200) FROM (SELECT name FROM people ORDER BY score DESC, id LIMIT 3000);"
        print "SELECT json_group_array(json_object(\x27id\x27, id, \x27n\x27, name, \x27s\x27, score)) FROM (SELECT * FROM people WHERE age = 42 ORDER BY id LIMIT 40);"
        print "UPDATE people SET note = note || upper(name) || replace(city, \x27city\x27, \x27-\x27) WHERE id % 3 = 0;"
        print "DELETE FROM people WHERE age < 20;"
        print "DELETE FROM events WHERE amount > 900;"
        print "VACUUM;"
        print "PRAGMA integrity_check;"
        print "SELECT count(*), sum(length(note)), total(score) FROM people;"
        print "SELECT age / 10 AS decade, count(*), printf(\x27%.2f\x27, avg(score)) FROM people GROUP BY decade ORDER BY decade;"
        print "SELECT count(DISTINCT person), sum(amount) FROM events;"
    }' >"$tmp/in/load.sql"
}

work_sqlite3() { # MODE DIR
    ok=0
    RUN_STDIN="$tmp/in/load.sql"
    run "$1" "$T" "$2/cmp/sqlite-load" \
        "$PROG" -bail "$2/test.db" || ok=1
    run "$1" "$T" "$2/cmp/sqlite-dump" "$PROG" "$2/test.db" .dump || ok=1
    return "$ok"
}
check_sqlite3() {
    want "integrity_check printed ok" grep -qx 'ok' "$1/cmp/sqlite-load.out" &&
        want "count(*) of people is 50000" grep -q '^50000|' "$1/cmp/sqlite-load.out" &&
        want ".dump has > 30000 people rows" \
            [ "$(grep -c '^INSERT INTO people' "$1/cmp/sqlite-dump.out")" -gt 30000 ]
}

work_python3() { # MODE DIR
    run "$1" "$T" "$2/cmp/python" PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 \
        "$PROG" -s "$tmp/in/workload.py"
}
check_python3() {
    want "a digest line" grep -q '^digest ' "$1/cmp/python.out" &&
        want "7 lines of output" [ "$(wc -l <"$1/cmp/python.out")" -eq 7 ]
}

# git: a repository of ~300 generated files built over 20 commits (edits,
# git mv, git rm), then log/diff/rev-parse/gc/fsck/grep/blame. Identities,
# dates and configuration are fixed, so every object id is deterministic and
# must be identical under hakmem.
git_env() { # nothing from the caller's git setup may leak in
    for v in GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY \
        GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_CEILING_DIRECTORIES GIT_NAMESPACE \
        GIT_CONFIG GIT_CONFIG_GLOBAL GIT_CONFIG_SYSTEM GIT_CONFIG_PARAMETERS \
        GIT_CONFIG_COUNT GIT_EXEC_PATH GIT_TEMPLATE_DIR GIT_DEFAULT_HASH \
        GIT_TRACE GIT_TRACE2 GIT_TRACE2_EVENT GIT_TRACE2_PERF GIT_OPTIONAL_LOCKS \
        GIT_EDITOR GIT_SEQUENCE_EDITOR EDITOR VISUAL GIT_ASKPASS SSH_ASKPASS; do
        unset "$v"
    done
    mkdir -p "$tmp/home/.config" || fail "mkdir failed"
    export HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config" \
        GIT_CONFIG_NOSYSTEM=1 GIT_PAGER=cat PAGER=cat GIT_TERMINAL_PROMPT=0 TZ=UTC \
        GIT_AUTHOR_NAME='Hakmem Author' GIT_AUTHOR_EMAIL=author@hakmem.invalid \
        GIT_COMMITTER_NAME='Hakmem Committer' GIT_COMMITTER_EMAIL=committer@hakmem.invalid \
        GIT_AUTHOR_DATE='1700000000 +0000' GIT_COMMITTER_DATE='1700000000 +0000'
}

gen_git_tree() { # DIR K: write the files that commit K adds (8, or 150 for K=1) or edits (10)
    awk -v dir="$1" -v k="$2" '
    function put(j, v,   p, l, t, n, w, x) {
        p = dir "/src/d" (j % 10) "/f" sprintf("%03d", j) ".txt"; x = j * 7919 + 17
        for (l = 1; l <= 24; l++) {
            t = "f" j " l" l ":"; n = 3 + (j + l) % 6
            for (w = 0; w < n; w++) {
                x = (x * 69069 + 1) % 4294967296
                t = t " " substr(words, 1 + int(x / 65536) % 60, 3 + int(x / 4096) % 5)
            }
            if ((j + l) % 37 == 0) t = t " someword"
            if (v > 1 && (l * 3 + v) % 7 == 0) t = t " edited-in-" v
            print t > p
        }
        close(p)
    }
    BEGIN {
        words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore"
        if (k == 1) { for (j = 0; j < 150; j++) put(j, 1) }
        else {
            for (j = 150 + (k - 2) * 8; j < 158 + (k - 2) * 8; j++) put(j, k)
            for (m = 0; m < 10; m++) put((k * 7 + m * 13) % 100, k)
        }
    }'
}

# gitrun MODE DIR PREFIX GIT-ARGS...: git with fixed options in DIR/repo.
gitrun() {
    g_mode=$1 g_dir=$2 g_pfx=$3
    shift 3
    run "$g_mode" "$T" "$g_pfx" "$PROG" -c core.autocrlf=false -c init.defaultBranch=main \
        -c gc.auto=0 -c maintenance.auto=false -c color.ui=false -c core.pager=cat \
        -C "$g_dir/repo" "$@"
}
# gstep MODE DIR STEP GIT-ARGS...: a history-building step; its stdout,
# stderr and status are appended to DIR/cmp/git-history.log (compared).
gstep() {
    s_mode=$1 s_dir=$2 s_step=$3
    shift 3
    s_ok=0
    gitrun "$s_mode" "$s_dir" "$s_dir/steps/$s_step" "$@" || s_ok=1
    {
        echo "== $s_step: status $(cat "$s_dir/steps/$s_step.rc")"
        cat "$s_dir/steps/$s_step.out"
        echo "-- stderr"
        cat "$s_dir/steps/$s_step.err"
    } >>"$s_dir/cmp/git-history.log"
    return "$s_ok"
}

work_git() { # MODE DIR
    ok=0
    mkdir "$2/repo" "$2/repo/moved" "$2/repo/src" "$2/steps" || return 1
    for d in 0 1 2 3 4 5 6 7 8 9; do mkdir "$2/repo/src/d$d" || return 1; done
    gstep "$1" "$2" init init -q || return 1
    k=1
    while [ "$k" -le 20 ]; do
        gen_git_tree "$2/repo" "$k" || return 1
        if [ $((k % 3)) -eq 0 ]; then # renames: f123 f124, f126 f127, ..., f138 f139
            for j in $((120 + k)) $((121 + k)); do
                gstep "$1" "$2" "mv-$j" mv "src/d$((j % 10))/f$j.txt" "moved/f$j.txt" || ok=1
            done
        fi
        if [ $((k % 4)) -eq 0 ]; then # deletes: f104 f108 ... f120
            j=$((100 + k))
            gstep "$1" "$2" "rm-$j" rm -q "src/d$((j % 10))/f$j.txt" || ok=1
        fi
        gstep "$1" "$2" "add-$k" add -A . || ok=1
        export GIT_AUTHOR_DATE="$((1700000000 + k * 3600)) +0000" \
            GIT_COMMITTER_DATE="$((1700000000 + k * 3600 + 60)) +0000"
        gstep "$1" "$2" "commit-$k" commit -m "commit $k" -m "Generated step $k of the hakmem preload test." || ok=1
        k=$((k + 1))
    done
    gitrun "$1" "$2" "$2/cmp/git-log" log --stat || ok=1
    gitrun "$1" "$2" "$2/cmp/git-diff-stat" diff HEAD~5 --stat || ok=1
    gitrun "$1" "$2" "$2/cmp/git-diff" diff HEAD~5 HEAD || ok=1
    gitrun "$1" "$2" "$2/cmp/git-rev-parse" rev-parse HEAD "HEAD^{tree}" || ok=1
    gitrun "$1" "$2" "$2/cmp/git-gc" gc -q || ok=1
    gitrun "$1" "$2" "$2/cmp/git-fsck" fsck --full --strict --no-progress || ok=1
    gitrun "$1" "$2" "$2/cmp/git-objects" cat-file --batch-all-objects --batch-check || ok=1
    gitrun "$1" "$2" "$2/cmp/git-grep" grep -n someword || ok=1
    gitrun "$1" "$2" "$2/cmp/git-blame" blame src/d7/f007.txt || ok=1
    gitrun "$1" "$2" "$2/cmp/git-log-follow" log --format='%H %s' --follow -- moved/f123.txt || ok=1
    return "$ok"
}
check_git() {
    want "20 commits in git log" [ "$(grep -c '^commit ' "$1/cmp/git-log.out")" -eq 20 ] &&
        want "rev-parse printed two object ids" \
            [ "$(grep -c '^[0-9a-f]\{40\}$' "$1/cmp/git-rev-parse.out")" -eq 2 ] &&
        want "git diff --stat reports changed files" grep -q 'files changed' "$1/cmp/git-diff-stat.out" &&
        want "more than 600 objects after gc" [ "$(wc -l <"$1/cmp/git-objects.out")" -gt 600 ] &&
        want "git grep found > 100 lines" [ "$(wc -l <"$1/cmp/git-grep.out")" -gt 100 ] &&
        want "blame has 24 lines from > 1 commit" [ "$(wc -l <"$1/cmp/git-blame.out")" -eq 24 ] &&
        want "blame names > 1 commit" [ "$(cut -c1-8 "$1/cmp/git-blame.out" | sort -u | wc -l)" -gt 1 ] &&
        want "log --follow sees the rename" [ "$(wc -l <"$1/cmp/git-log-follow.out")" -ge 2 ]
}

# make: a generated C project (30 modules + main, two headers) built with
# make -j2; a header edit rebuilds only its users; then make -j2 clean all.
# The make log is compared sorted (parallel order varies); the objects' nm
# output, their sha256 and the built program's output are compared too.
gen_make_project() {
    mkdir -p "$tmp/in/proj/src" "$tmp/in/proj/include" || fail "mkdir failed"
    awk -v dir="$tmp/in/proj" '
    BEGIN {
        N = 30
        h = dir "/include/common.h"
        print "#ifndef COMMON_H\n#define COMMON_H\n#define PROJECT_SEED 12345UL" > h
        for (i = 0; i < N; i++) printf "unsigned long mod%02d(unsigned long x);\n", i > h
        print "#endif" > h; close(h)
        u = dir "/include/util.h"
        print "#ifndef UTIL_H\n#define UTIL_H" > u
        print "static inline unsigned long util_mix(unsigned long a, unsigned long b) { return (a ^ b) * 0x100000001b3UL + (a >> 7); }" > u
        print "#define UTIL_ROUNDS 3\n#endif" > u; close(u)
        srcs = "src/main.c"; uobjs = ""
        for (i = 0; i < N; i++) {
            c = sprintf("%s/src/mod%02d.c", dir, i)
            srcs = srcs sprintf(" src/mod%02d.c", i)
            print "#include \"common.h\"" > c
            if (i % 3 == 0) { print "#include \"util.h\"" > c; uobjs = uobjs sprintf(" obj/mod%02d.o", i) }
            printf "static const char tag%02d[] = \"module %02d\";\n", i, i > c
            printf "unsigned long mod%02d(unsigned long x) {\n    unsigned long acc = PROJECT_SEED + %d;\n", i, i * 97 > c
            printf "    for (int k = 0; k < %d; k++) {\n", 50 + i * 3 > c
            if (i % 3 == 0) printf "        for (int r = 0; r < UTIL_ROUNDS; r++) acc = util_mix(acc, x + (unsigned long)k);\n" > c
            else printf "        acc = acc * 6364136223846793005UL + x + (unsigned long)k * %d;\n", i + 1 > c
            printf "        acc ^= (unsigned long)tag%02d[k %% (sizeof tag%02d - 1)];\n    }\n    return acc;\n}\n", i, i > c
            close(c)
        }
        m = dir "/src/main.c"
        print "#include <stdio.h>\n#include \"common.h\"\nint main(void) {\n    unsigned long t = 0;" > m
        for (i = 0; i < N; i++) printf "    t = mod%02d(t + %d); printf(\"mod%02d %%lu\\n\", t);\n", i, i, i > m
        print "    printf(\"total %lu\\n\", t);\n    return 0;\n}" > m; close(m)
        mk = dir "/Makefile"
        print "CC = gcc\nCFLAGS = -O2 -Wall -Iinclude\nSRCS =" srcs > mk
        print "OBJS = $(SRCS:src/%.c=obj/%.o)\nUTIL_OBJS =" uobjs "\n" > mk
        print "all: prog\nprog: $(OBJS)\n\t$(CC) $(CFLAGS) -o $@ $(OBJS)" > mk
        print "obj/%.o: src/%.c include/common.h | obj\n\t$(CC) $(CFLAGS) -c -o $@ $<" > mk
        print "$(UTIL_OBJS): include/util.h\nobj:\n\tmkdir -p obj\nclean:\n\trm -f obj/*.o prog\n.PHONY: all clean" > mk
        print "# make -j clean all: clean must run first, and everything is rebuilt after it" > mk
        print "ifneq ($(filter clean,$(MAKECMDGOALS)),)\n$(OBJS) prog: clean\nendif" > mk
        close(mk)
    }' || fail "cannot generate the make project"
}

# mstep MODE DIR STEP MAKE-ARGS...: make in DIR/proj; its stdout and stderr
# are compared sorted, its status as is.
mstep() {
    m_mode=$1 m_dir=$2 m_step=$3
    shift 3
    m_ok=0
    (cd "$m_dir/proj" && run "$m_mode" "$T" "$m_dir/steps/$m_step" TMPDIR="$m_dir/tmp" \
        "$PROG" "$@") || m_ok=1
    sort "$m_dir/steps/$m_step.out" >"$m_dir/cmp/$m_step.out.sorted"
    sort "$m_dir/steps/$m_step.err" >"$m_dir/cmp/$m_step.err.sorted"
    cp "$m_dir/steps/$m_step.rc" "$m_dir/cmp/$m_step.rc"
    return "$m_ok"
}

work_make() { # MODE DIR
    ok=0
    unset MAKEFLAGS MFLAGS GNUMAKEFLAGS MAKELEVEL MAKEFILES MAKE_RESTARTS
    mkdir "$2/steps" "$2/tmp" && cp -R "$tmp/in/proj" "$2/proj" || return 1
    # Sources in the past: timestamps, not the clock's resolution, decide.
    find "$2/proj" -type f -exec touch -d '2001-01-01 00:00:00' {} + || return 1
    mstep "$1" "$2" make-build -j2 || ok=1
    mstep "$1" "$2" make-noop -j2 || ok=1
    # Objects older than now but newer than the sources; then edit util.h:
    # only its 10 users are recompiled, then prog is relinked.
    touch -d '2002-01-01 00:00:00' "$2/proj/obj/"*.o "$2/proj/prog" || ok=1
    sed 's/UTIL_ROUNDS 3/UTIL_ROUNDS 4/' "$tmp/in/proj/include/util.h" >"$2/proj/include/util.h" || ok=1
    mstep "$1" "$2" make-incr -j2 || ok=1
    mstep "$1" "$2" make-rebuild -j2 clean all || ok=1
    if [ -x "$2/proj/prog" ]; then
        run "$1" "$T" "$2/cmp/prog-run" "$2/proj/prog" || ok=1
    fi
    (cd "$2/proj" && run base 20 "$2/cmp/nm" nm -S obj/*.o) || ok=1
    (cd "$2/proj" && sha256sum obj/*.o prog) >"$2/cmp/objects.sha256" || ok=1
    return "$ok"
}
check_make() {
    want "the program printed a total" grep -q '^total ' "$1/cmp/prog-run.out" &&
        want "the first build compiled 31 files" \
            [ "$(grep -c '^gcc .* -c ' "$1/cmp/make-build.out.sorted")" -eq 31 ] &&
        want "the no-op make did nothing" grep -q 'Nothing to be done' "$1/cmp/make-noop.out.sorted" &&
        want "the util.h edit recompiled 10 files" \
            [ "$(grep -c '^gcc .* -c ' "$1/cmp/make-incr.out.sorted")" -eq 10 ] &&
        want "the util.h edit relinked prog" grep -q '^gcc .* -o prog ' "$1/cmp/make-incr.out.sorted" &&
        want "clean all removed and rebuilt" grep -q '^rm -f ' "$1/cmp/make-rebuild.out.sorted" &&
        want "clean all compiled 31 files" \
            [ "$(grep -c '^gcc .* -c ' "$1/cmp/make-rebuild.out.sorted")" -eq 31 ] &&
        want "nm lists mod29" grep -q ' T mod29$' "$1/cmp/nm.out" &&
        want "make wrote nothing to stderr" [ ! -s "$1/cmp/make-build.err.sorted" ]
}

case $name in
sort) gen_sort_input ;;
gcc) gen_c_program ;;
sqlite3) gen_sql ;;
python3) cp "$srcdir/workload.py" "$tmp/in/workload.py" || fail "cannot read $srcdir/workload.py" ;;
git) git_env ;;
make) gen_make_project ;;
esac

# ---------------------------------------------------------------------------
# 3. Baseline, then the same under hakmem.
T=$TIMEOUT_BASE
"work_$name" base "$tmp/base" || fail "the baseline run (without hakmem) failed; this is not a hakmem problem"
"check_$name" "$tmp/base" || fail "the baseline output looks wrong (workload or tool problem, not hakmem)"
say "baseline done"

T=$TIMEOUT_HAK
hak_ok=1
"work_$name" hak "$tmp/hak" || hak_ok=0

# ---------------------------------------------------------------------------
# 4. Compare everything: stdout, stderr, exit status and produced files.
ndiff=0
for rel in $( (ls "$tmp/base/cmp" && ls "$tmp/hak/cmp") | sort -u); do
    if [ ! -e "$tmp/hak/cmp/$rel" ] || [ ! -e "$tmp/base/cmp/$rel" ]; then
        say "DIFF: $rel exists only in one of the runs"
        ndiff=$((ndiff + 1))
        continue
    fi
    if cmp -s "$tmp/base/cmp/$rel" "$tmp/hak/cmp/$rel"; then
        continue
    fi
    ndiff=$((ndiff + 1))
    say "DIFF: $rel differs (baseline sha256 $(sha256sum <"$tmp/base/cmp/$rel" | cut -c1-16)," \
        "hakmem sha256 $(sha256sum <"$tmp/hak/cmp/$rel" | cut -c1-16))"
    case $rel in
    *.o | prog) cmp "$tmp/base/cmp/$rel" "$tmp/hak/cmp/$rel" | sed 's/^/    /' ;;
    *) diff -u --label "baseline/$rel" --label "hakmem/$rel" \
        "$tmp/base/cmp/$rel" "$tmp/hak/cmp/$rel" | head -n 30 | sed 's/^/    /' ;;
    esac
done

nfiles=$(ls "$tmp/base/cmp" | wc -l)
if [ $hak_ok = 0 ] || [ $ndiff -ne 0 ]; then
    fail "$name under hakmem (HAKMEM_SAFETY=$box) differs from the baseline: $ndiff of $nfiles compared files differ"
fi
say "PASS: $nfiles outputs identical with and without hakmem"
for f in "$tmp/hak/cmp"/*.out; do
    case $f in *sort-*.out | *sqlite-dump.out)
        say "  ${f##*/}: sha256 $(sha256sum <"$f" | cut -c1-64)" ;;
    *git-rev-parse.out) say "  ${f##*/}: $(tr '\n' ' ' <"$f")" ;;
    esac
done
exit 0
