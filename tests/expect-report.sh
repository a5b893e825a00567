# Sourced by tests/badfree/check.sh and tests/heapbugs/check.sh: the check
# of a bad call hakmem must report, and the line each case prints.
#
# expect_report MODE: with the program's exit status in $rc, its stdout in
# $tmp/out and the "call:"/"expect:" lines it printed in $call and
# $reason, appends to $problem what is wrong for HAKMEM_ON_ERROR=MODE
# (abort or warn): abort must die by SIGABRT, warn must exit 0 and print
# "survived"; stderr ($tmp/err) must hold exactly one "hakmem: error: "
# line, naming the call and pointer first and saying the reason.
expect_report() {
    if [ "$1" = abort ]; then
        # 134 = 128 + SIGABRT(6), as the shell reports a signal death
        [ "$rc" -eq 134 ] || problem="${problem:+$problem; }exit status $rc, expected death by SIGABRT (134)"
        grep -q '^survived$' "$tmp/out" && problem="${problem:+$problem; }it survived"
    else
        [ "$rc" -eq 0 ] || problem="${problem:+$problem; }exit status $rc, expected 0"
        grep -q '^survived$' "$tmp/out" || problem="${problem:+$problem; }no 'survived'"
    fi
    _nlines=$(grep -c '^hakmem: error: ' "$tmp/err")
    if [ "$_nlines" -ne 1 ]; then
        problem="${problem:+$problem; }$_nlines 'hakmem: error: ' lines on stderr, expected 1"
        return
    fi
    _line=$(grep '^hakmem: error: ' "$tmp/err")
    case $_line in
    "hakmem: error: $call"*) ;;
    *) problem="${problem:+$problem; }the line does not name '$call' first" ;;
    esac
    case $_line in
    *"$reason"*) ;;
    *) problem="${problem:+$problem; }the line does not say '$reason'" ;;
    esac
}

# print_verdict: one "ok"/"FAIL" line for $case under $box and $mode, with
# the program's output when $problem says what went wrong; sets failed=1 then.
print_verdict() {
    if [ -n "$problem" ]; then
        failed=1
        echo "FAIL $case safety=$box on_error=$mode: $problem"
        sed 's/^/    stdout: /' "$tmp/out"
        sed 's/^/    stderr: /' "$tmp/err" | head -n 5
    else
        echo "ok   $case safety=$box on_error=$mode"
    fi
}
