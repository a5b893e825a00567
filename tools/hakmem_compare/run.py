"""Running commands: through hyperfine, one row after another in
interleaved rounds, in their own process group.
"""

import json
import os
import shlex
import signal
import statistics
import subprocess
import time
from pathlib import Path


def shell_cmd(env, argv):
    """The command as hyperfine runs it (env VAR=... prog args): every row
    goes through the same `env` exec, glibc's too."""
    return shlex.join(["env"] + [f"{k}={v}" for k, v in env.items()] + list(argv))


def clean_environ(locale_c=True):
    """The caller's environment without allocator settings, so that the
    glibc row is glibc and each row gets only its own settings."""
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("HAKMEM_")
           and not k.startswith("MIMALLOC_") and k not in ("MALLOC_CONF", "TCMALLOC_RELEASE_RATE")}
    if locale_c:
        env["LC_ALL"] = "C"
    return env


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_with_timeout(argv, env, timeout, cwd=None):
    """subprocess.run in its own process group, killed as a group on timeout,
    and on Ctrl-C, which the group, in its own session, does not receive."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return None, out, err, True
    except BaseException:
        kill_group(proc)
        proc.wait()
        raise


def run_hyperfine(label, cmd, warmup, runs, timeout, tmpdir, henv, ignore_failure=False,
                  prepare=None, output=None):
    """One hyperfine call: `runs` timed runs of the shell-words command cmd.
    Returns status ('ok', 'failed', 'timeout'), message, hyperfine (its
    JSON result) and hyperfine_command."""
    jpath = Path(tmpdir) / "hf.json"
    if jpath.exists():
        jpath.unlink()
    hargv = ["hyperfine", "-N", "--style", "basic", "--warmup", str(warmup), "--runs",
             str(runs), "--export-json", str(jpath), "--command-name", label]
    if ignore_failure:
        hargv.append("-i")
    if prepare:
        # through sh, as the user wrote it (-N would split it into words)
        hargv += ["--prepare", shlex.join(["sh", "-c", prepare])]
    if output:
        hargv += ["--output", str(output)]
    hargv.append(cmd)
    rc, out, err, timed_out = run_with_timeout(hargv, henv, timeout)
    rec = {"command": cmd, "hyperfine_command": shlex.join(hargv)}
    if timed_out:
        rec.update(status="timeout", message=f"no result within {timeout} s")
        return rec
    if rc != 0 or not jpath.exists():
        msg = [m for m in (err or out or "").strip().splitlines() if m.strip()]
        rec.update(status="failed", message=" | ".join(msg[-3:])[:300] or f"exit {rc}")
        return rec
    rec.update(status="ok", message="", hyperfine=json.loads(jpath.read_text())["results"][0])
    return rec


def merge_hyperfine(rounds):
    """One hyperfine-like result from the rounds of one row."""
    if not rounds:
        return None
    times = [t for r in rounds for t in r.get("times", [])]
    n = len(times)
    users = [r["user"] for r in rounds if r.get("user") is not None]
    systems = [r["system"] for r in rounds if r.get("system") is not None]
    return {
        "command": rounds[0].get("command"),
        "times": times,
        "exit_codes": [c for r in rounds for c in r.get("exit_codes", [])],
        "mean": statistics.fmean(times) if n else None,
        "stddev": statistics.stdev(times) if n > 1 else None,
        "median": statistics.median(times) if n else None,
        "min": min(times) if n else None,
        "max": max(times) if n else None,
        "user": statistics.fmean(users) if users else None,
        "system": statistics.fmean(systems) if systems else None,
    }


def run_interleaved(rows, rounds, run_one, adjust=None):
    """Runs rounds: each row whose status is 'ok' once per round, in an order
    rotated by one each round, so that a load spike on a shared machine does
    not fall on one row only. run_one(row, rnd) runs one round of a row;
    adjust(rnd, seconds, target), when given, returns the new number of
    rounds after each round. Returns the number of rounds run."""
    target, rnd = rounds, 0
    while rnd < target:
        start = time.time()
        active = [r for r in rows if r["status"] == "ok"]
        if active:
            k = rnd % len(active)
            active = active[k:] + active[:k]
        for row in active:
            run_one(row, rnd)
        if adjust:
            target = adjust(rnd, time.time() - start, target)
        rnd += 1
    return target
