#!/usr/bin/env python3
"""Run a command under several allocators with hyperfine and report.

Two users, one code path:
  - `hakmem compare [OPTIONS] -- CMD [ARGS...]` (tools/hakmem runs this file):
    the user's command under glibc, mimalloc, jemalloc, tcmalloc, hakmem and
    any --with / --lib entries, interleaved; a table of wall time, user+sys,
    peak RSS, ratios and spread; exit status (and stdout) checked against
    glibc's run; --out DIR writes results.{json,csv,md,png}.
  - bench/run (the project's benchmark runner) imports the shared parts:
    peer discovery, hyperfine driving, interleaved rounds, medians, ratios,
    CSV and the gnuplot plot.

Python 3 standard library only. Installed as <datadir>/hakmem/hakmem_compare.py.
"""

import argparse
import csv
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEERS = ["glibc", "mimalloc", "jemalloc", "tcmalloc"]
PEER_SONAMES = {
    "mimalloc": ["libmimalloc.so.2", "libmimalloc.so"],
    "jemalloc": ["libjemalloc.so.2", "libjemalloc.so"],
    "tcmalloc": ["libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so"],
}
# Debian 12 packages that ship the libraries above.
PEER_DEBIAN_PACKAGES = {
    "mimalloc": "libmimalloc2.0", "jemalloc": "libjemalloc2",
    "tcmalloc": "libtcmalloc-minimal4",
}
# Written by the peak-RSS wrapper (/usr/bin/time -f) into its own file, so
# that the command's stdout and stderr stay the command's.
RSS_MARK = "hakmem-compare-maxrss-kb"
TIME_PROGRAM = "/usr/bin/time"


def log(msg=""):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Peers
# ---------------------------------------------------------------------------
def ldconfig_paths():
    """soname -> path from the dynamic linker's cache (this machine's ABI)."""
    out = ""
    for prog in ("ldconfig", "/sbin/ldconfig"):
        try:
            out = subprocess.run([prog, "-p"], capture_output=True, text=True,
                                 timeout=20).stdout
            break
        except (OSError, subprocess.SubprocessError):
            continue
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+\((.*)\)\s+=>\s+(\S+)", line)
        if m and (platform.machine() != "x86_64" or "x86-64" in m.group(2)):
            found.setdefault(m.group(1), m.group(3))
    return found


def peer_dirs():
    machine = platform.machine()
    return [f"/usr/lib/{machine}-linux-gnu", f"/lib/{machine}-linux-gnu", "/usr/lib64",
            "/usr/lib", "/usr/local/lib", "/usr/local/lib64"]


def find_peer(name, ldcache, dirs=None):
    """Path of peer allocator `name`'s library, or None."""
    for soname in PEER_SONAMES[name]:
        if soname in ldcache and os.path.exists(ldcache[soname]):
            return ldcache[soname]
        for d in (peer_dirs() if dirs is None else dirs):
            p = os.path.join(d, soname)
            if os.path.exists(p):
                return p
    return None


def peer_missing_message(name):
    return f"{name} not installed (apt-get install {PEER_DEBIAN_PACKAGES[name]})"


def discover_peers(ldcache=None, dirs=None):
    """One entry per peer: name, kind 'peer', preload (path or None for
    glibc), missing (why it cannot run, or None)."""
    if ldcache is None:
        ldcache = ldconfig_paths()
    out = [new_row("glibc", "peer")]
    for name in PEERS[1:]:
        path = find_peer(name, ldcache, dirs)
        out.append(new_row(name, "peer", path,
                           missing=None if path else peer_missing_message(name)))
    return out


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------
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


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


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


# ---------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------
def ratio(x, base):
    return x / base if x and base else None


def spread_pct(times):
    """(max - min) / median of the timed runs, in percent."""
    med = median(times)
    if not times or not med:
        return None
    return (max(times) - min(times)) / med * 100.0


def pick(values, better):
    """The name whose value is best (better: min or max) among those with
    one, or None."""
    have = {k: v for k, v in values.items() if v}
    return better(have, key=have.get) if have else None


# ---------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------
def fmt(x, spec, missing="—"):
    return missing if x is None else format(x, spec)


def mib(kb):
    return None if kb is None else kb / 1024.0


def csv_value(v):
    return "" if v is None else round(v, 6) if isinstance(v, float) else v


def gp_quote(s):
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + s + '"'


def write_plot(outdir, png_name, panels, names, colors, title, size=(1800, 1150)):
    """Grouped bar charts (gnuplot), one panel above the other. Each panel:
    dict(file=data file name, ylabel=..., groups=[(label, {name: value})]).
    A dashed line marks 1.0. Returns the PNG path or None."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        log("gnuplot not found: no PNG (apt-get install gnuplot-nox)")
        return None
    outdir = Path(outdir)
    all_ys = []
    for p in panels:
        ys = []
        with open(outdir / p["file"], "w") as f:
            f.write("# group " + " ".join(gp_quote(n) for n in names) + "\n")
            for label, vals in p["groups"]:
                cells = []
                for n in names:
                    v = vals.get(n)
                    cells.append("?" if v is None else f"{v:.4f}")
                    if v is not None:
                        ys.append(v)
                f.write(gp_quote(label) + " " + " ".join(cells) + "\n")
        p["ys"] = ys
        all_ys += ys
    if not all_ys:
        return None

    def yscale(ys):
        pos = [y for y in ys if y > 0]
        if pos and max(pos) / min(pos) > 10:
            return "set logscale y\nset yrange [*:*]\n"
        return "unset logscale y\nset yrange [0:*]\n"

    def plot_cmd(fname):
        parts = []
        for i, n in enumerate(names):
            src = gp_quote(fname) if i == 0 else "''"
            xt = ":xtic(1)" if i == 0 else ""
            parts.append(f"{src} using {i + 2}{xt} title {gp_quote(n)} "
                         f"lc rgb {gp_quote(colors.get(n, '#333333'))}")
        parts.append("1 with lines dt 2 lw 2 lc rgb 'black' notitle")
        return "plot " + ", \\\n  ".join(parts) + "\n"

    png = outdir / png_name
    w, h = size
    script = f"""
set terminal pngcairo size {w},{h} font "DejaVu Sans,13" noenhanced
set output {gp_quote(str(png))}
set multiplot layout {len(panels)},1 title {gp_quote(title)} font ",15"
set style data histograms
set style histogram clustered gap 1.5
set style fill solid 0.9 border rgb "#333333"
set boxwidth 0.95
set datafile missing "?"
set grid ytics
set lmargin 12
set rmargin 30
set key outside right top vertical Left reverse samplen 2 spacing 1.1 font ",12"
set xtics nomirror scale 0 font ",13" offset 0,-0.3
set bmargin 4
"""
    for i, p in enumerate(panels):
        if i == 1:
            script += "unset key\n"
        script += (f"set ylabel {gp_quote(p['ylabel'])}\n{yscale(p['ys'])}"
                   f"set xrange [-0.6:{len(p['groups']) - 0.4}]\n{plot_cmd(p['file'])}\n")
    script += "unset multiplot\n"
    gp = outdir / "plot.gp"
    gp.write_text(script)
    r = subprocess.run([gnuplot, str(gp)], cwd=outdir, capture_output=True, text=True)
    if r.returncode != 0:
        # the cairo terminal may be missing: fall back to libgd's png
        gp.write_text(script.replace(f'set terminal pngcairo size {w},{h} font "DejaVu Sans,13"',
                                     f"set terminal png size {w},{h}"))
        r = subprocess.run([gnuplot, str(gp)], cwd=outdir, capture_output=True, text=True)
    if r.returncode != 0:
        log("gnuplot failed: " + r.stderr.strip()[:500])
        return None
    return png


# ---------------------------------------------------------------------------
# hakmem compare
# ---------------------------------------------------------------------------
COLORS = {
    "glibc": "#7f7f7f", "mimalloc": "#4e79a7", "jemalloc": "#59a14f", "tcmalloc": "#9c755f",
    "hakmem": "#e15759",
}
EXTRA_COLORS = ["#f28e2b", "#edc948", "#76b7b2", "#d37295", "#bab0ac", "#ff9d9a", "#b07aa1"]
BUILTIN = PEERS + ["hakmem"]
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]*$")
VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class UsageError(Exception):
    pass


def parse_with(spec):
    """--with NAME=VAR=VALUE[,VAR=VALUE...] -> (name, {VAR: VALUE})."""
    name, sep, rest = spec.partition("=")
    if not sep or not NAME_RE.match(name) or not rest:
        raise UsageError(f"--with wants NAME=VAR=VALUE[,VAR=VALUE...], got '{spec}'")
    env = {}
    for item in rest.split(","):
        var, sep, value = item.partition("=")
        if not sep or not VAR_RE.match(var):
            raise UsageError(f"--with {name}: '{item}' is not VAR=VALUE")
        env[var] = value
    return name, env


def parse_lib(spec):
    """--lib NAME=/path/libhakmem.so -> (name, path)."""
    name, sep, path = spec.partition("=")
    if not sep or not NAME_RE.match(name) or not path:
        raise UsageError(f"--lib wants NAME=/path/to/libhakmem.so, got '{spec}'")
    if not os.path.isfile(path):
        raise UsageError(f"--lib {name}: no such file: {path}")
    return name, os.path.abspath(path)


def parse_args(argv):
    """(options, command argv). Raises UsageError."""
    p = argparse.ArgumentParser(
        prog="hakmem compare", add_help=False,
        usage="hakmem compare [OPTIONS] -- CMD [ARGS...]",
        description="Run CMD under glibc, mimalloc, jemalloc, tcmalloc (those installed) and "
                    "hakmem, interleaved, with hyperfine; print median wall time, user+sys, "
                    "peak RSS, ratios and spread; check every run's exit status (and stdout "
                    "with --check-output) against glibc's.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status: 0 when every row ran like glibc's, 1 when a run failed or "
               "differed\n(or hakmem could not run), 2 on a usage error. A peer that is "
               "not installed\nis skipped. See hakmem(1).\n\nexamples:\n"
               "  hakmem compare --runs 5 --out /tmp/cmp -- sort -S 30M big.txt\n"
               "  hakmem compare --check-output --with nofront=HAKMEM_FRONT=none -- ./my_prog")
    p.add_argument("-h", "--help", action="store_true", help="show this help")
    p.add_argument("--runs", type=int, default=5, metavar="N", help="timed runs per allocator (default 5)")
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="untimed runs per allocator before the first (default 1)")
    p.add_argument("--prepare", metavar="CMD", default=None,
                   help="shell command run before each timed run (hyperfine --prepare)")
    p.add_argument("--with", dest="with_", action="append", default=[],
                   metavar="NAME=VAR=VALUE[,VAR=VALUE]",
                   help="also run hakmem with these environment settings, as row NAME")
    p.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                   help="also run this libhakmem.so (another build), as row NAME")
    p.add_argument("--hakmem-lib", metavar="PATH", default=None,
                   help="the libhakmem.so of the hakmem row (default: $HAKMEM_LIB, the one "
                        "`hakmem lib` prints)")
    p.add_argument("--allocators", metavar="LIST", default="",
                   help="comma-separated subset of " + ",".join(BUILTIN) + " (default: all)")
    p.add_argument("--check-output", action="store_true",
                   help="also compare each run's stdout with glibc's")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write results.json, results.csv, results.md and results.png there")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="seconds allowed per run (default: none)")
    if "--" in argv:
        i = argv.index("--")
        opts, cmd = argv[:i], argv[i + 1:]
    else:
        opts, cmd = argv, []
        # no `--`: the command starts at the first word that is not an option
        # or an option's value
        taking = {"--runs", "--warmup", "--prepare", "--with", "--lib", "--hakmem-lib",
                  "--allocators", "--out", "--timeout"}
        i = 0
        while i < len(argv):
            a = argv[i]
            if not a.startswith("-"):
                opts, cmd = argv[:i], argv[i:]
                break
            i += 2 if a in taking else 1

    def error(message):
        raise UsageError(message)
    p.error = error
    args = p.parse_args(opts)
    if args.help:
        return p, args, cmd
    if not cmd:
        raise UsageError("no command given: hakmem compare [OPTIONS] -- CMD [ARGS...]")
    if args.runs < 1:
        raise UsageError("--runs must be at least 1")
    if args.warmup < 0:
        raise UsageError("--warmup must be 0 or more")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    args.withs = [parse_with(s) for s in args.with_]
    args.libs = [parse_lib(s) for s in args.lib]
    args.selected = [s.strip() for s in args.allocators.split(",") if s.strip()] or list(BUILTIN)
    bad = [s for s in args.selected if s not in BUILTIN]
    if bad:
        raise UsageError(f"--allocators: unknown {', '.join(bad)} (known: {', '.join(BUILTIN)})")
    names = args.selected + [n for n, _ in args.withs] + [n for n, _ in args.libs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"row name used twice: {', '.join(dup)}")
    return p, args, cmd


def default_hakmem_lib():
    """$HAKMEM_LIB, the build tree next to this file, or the linker cache."""
    if os.environ.get("HAKMEM_LIB"):
        return os.environ["HAKMEM_LIB"]
    here = Path(__file__).resolve().parent
    for d in (here.parent / "build" / "src",):
        for f in ("libhakmem.so.0", "libhakmem.so"):
            if (d / f).is_file():
                return str(d / f)
    cache = ldconfig_paths()
    return cache.get("libhakmem.so.0") or cache.get("libhakmem.so")


def resolve_rows(args, ldcache=None, peer_libdirs=None):
    """The rows to run, in order: peers, hakmem, --with, --lib."""
    rows = [p for p in discover_peers(ldcache, peer_libdirs) if p["name"] in args.selected]
    hlib = args.hakmem_lib or default_hakmem_lib()
    hmiss = None
    if not hlib:
        hmiss = "libhakmem.so not found (install libhakmem0, or pass --hakmem-lib PATH)"
    elif not os.path.isfile(hlib):
        hmiss, hlib = f"no such library: {hlib}", None
    if "hakmem" in args.selected:
        rows.append(new_row("hakmem", "hakmem", hlib, missing=hmiss))
    for name, env in args.withs:
        rows.append(new_row(name, "with", hlib, env, missing=hmiss))
    for name, path in args.libs:
        rows.append(new_row(name, "lib", path))
    return rows


def describe(row):
    parts = [f"LD_PRELOAD={row['preload']}"] if row["preload"] else ["nothing preloaded"]
    parts += [f"{k}={v}" for k, v in row["env"].items()]
    return ", ".join(parts)


def read_rss(path):
    """Peak RSS (KiB) of the last run the wrapper wrote to path."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return None
    vals = [int(line.split()[1]) for line in lines
            if line.startswith(RSS_MARK + " ") and line.split()[1].isdigit()]
    return vals[-1] if vals else None


def file_digest(path):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def add_round(row, hf, rss_kb=None, digest=None):
    """Adds one round (a hyperfine JSON result of one timed run) to a row."""
    row["rounds"].append(hf)
    row["times"] += hf.get("times", [])
    row["exit_codes"] += hf.get("exit_codes", [])
    row["user_sys"].append((hf.get("user") or 0.0) + (hf.get("system") or 0.0))
    if rss_kb is not None:
        row["rss_kb"].append(rss_kb)
    if digest is not None:
        row["digests"].append(digest)


def new_row(name, kind, preload=None, env=None, missing=None):
    return dict(name=name, kind=kind, preload=preload, env=env or {}, missing=missing,
                required=kind != "peer" or name == "glibc",
                status="missing" if missing else "ok", message=missing or "",
                times=[], user_sys=[], rss_kb=[], exit_codes=[], digests=[], rounds=[])


def row_metrics(row):
    """Medians, spread and the per-run lists of one row."""
    times = row.get("times") or []
    m = {"runs": len(times), "median_s": median(times),
         "min_s": min(times) if times else None, "max_s": max(times) if times else None,
         "spread_pct": spread_pct(times),
         "user_sys_s": median(row.get("user_sys") or []),
         "peak_rss_kb": median(row.get("rss_kb") or [])}
    return m


def add_ratios(rows):
    """Ratios to glibc and to the best (fastest) / leanest peer, over the
    rows whose runs all succeeded like glibc's."""
    good = {r["name"]: r["metrics"] for r in rows if r["check"] == "ok"}
    peers = {n: m for n, m in good.items() if n in PEERS}
    best = pick({n: m.get("median_s") for n, m in peers.items()}, min)
    lean = pick({n: m.get("peak_rss_kb") for n, m in peers.items()}, min)
    glibc = good.get("glibc", {})
    for r in rows:
        m = r["metrics"]
        m["best_peer"], m["leanest_peer"] = best, lean
        m["time_vs_glibc"] = ratio(m.get("median_s"), glibc.get("median_s"))
        m["time_vs_best_peer"] = ratio(m.get("median_s"), best and peers[best]["median_s"])
        m["rss_vs_glibc"] = ratio(m.get("peak_rss_kb"), glibc.get("peak_rss_kb"))
        m["rss_vs_leanest_peer"] = ratio(m.get("peak_rss_kb"),
                                         lean and peers[lean]["peak_rss_kb"])


def add_checks(rows, check_output):
    """Each row's 'check': 'ok', or what went wrong, judged against the
    reference row (glibc, else the first that ran)."""
    ran = [r for r in rows if r["status"] == "ok"]
    ref = next((r for r in ran if r["name"] == "glibc"), ran[0] if ran else None)
    ref_codes = set(ref.get("exit_codes") or []) if ref else set()
    ref_out = set(ref.get("digests") or []) if ref else set()
    for r in rows:
        if r["status"] == "missing":
            r["check"] = "missing" if not r["required"] else "missing (required)"
            continue
        if r["status"] != "ok":
            r["check"] = f"{r['status']}: {r['message']}"
            continue
        codes = sorted(set(r.get("exit_codes") or []))
        problems = []
        if codes != [0]:
            problems.append("exit " + "/".join(str(c) for c in codes))
        if r is not ref and set(codes) != ref_codes:
            problems.append(f"{ref['name']} exits " + "/".join(str(c) for c in sorted(ref_codes)))
        if check_output:
            outs = set(r.get("digests") or [])
            if len(outs) > 1:
                problems.append("stdout varies between runs")
            if r is not ref and outs != ref_out:
                problems.append(f"stdout differs from {ref['name']}'s")
        r["check"] = "; ".join(problems) if problems else "ok"


def text_table(rows):
    head = ["allocator", "median wall", "user+sys", "peak RSS", "time/glibc",
            "time/best peer", "RSS/glibc", "RSS/leanest", "spread", "check"]
    body = []
    for r in rows:
        m = r["metrics"]
        if r["status"] == "missing":
            body.append([r["name"], "skipped: " + (r["message"] or "")])
            continue
        body.append([
            r["name"], fmt(m.get("median_s"), ".3f") + " s" if m.get("median_s") else "—",
            fmt(m.get("user_sys_s"), ".3f") + " s" if m.get("user_sys_s") is not None else "—",
            fmt(mib(m.get("peak_rss_kb")), ".1f") + " MiB" if m.get("peak_rss_kb") else "—",
            fmt(m.get("time_vs_glibc"), ".2f"), fmt(m.get("time_vs_best_peer"), ".2f"),
            fmt(m.get("rss_vs_glibc"), ".2f"), fmt(m.get("rss_vs_leanest_peer"), ".2f"),
            fmt(m.get("spread_pct"), ".1f") + "%" if m.get("spread_pct") is not None else "—",
            r["check"]])
    widths = [max(len(row[i]) for row in [head] + [b for b in body if len(b) == len(head)])
              for i in range(len(head))]
    lines = []
    for row in [head] + body:
        if len(row) != len(head):
            lines.append(f"{row[0]:<{widths[0]}}  {row[1]}")
            continue
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in
                                             zip(row[1:-1], widths[1:-1])] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def markdown_table(rows):
    lines = ["| allocator | median wall (s) | user+sys (s) | peak RSS (MiB) | time / glibc "
             "| time / best peer | RSS / glibc | RSS / leanest peer | spread (%) | check |",
             "|" + "---|" * 10]
    for r in rows:
        m = r["metrics"]
        if r["status"] == "missing":
            lines.append(f"| {r['name']} | skipped: {r['message']} |" + " |" * 8)
            continue
        lines.append("| " + " | ".join([
            r["name"], fmt(m.get("median_s"), ".3f"), fmt(m.get("user_sys_s"), ".3f"),
            fmt(mib(m.get("peak_rss_kb")), ".1f"), fmt(m.get("time_vs_glibc"), ".2f"),
            fmt(m.get("time_vs_best_peer"), ".2f"), fmt(m.get("rss_vs_glibc"), ".2f"),
            fmt(m.get("rss_vs_leanest_peer"), ".2f"), fmt(m.get("spread_pct"), ".1f"),
            r["check"].replace("|", "/")]) + " |")
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ["allocator", "kind", "status", "check", "runs", "median_s", "min_s", "max_s",
               "spread_pct", "user_sys_s", "peak_rss_kb", "time_vs_glibc",
               "time_vs_best_peer", "rss_vs_glibc", "rss_vs_leanest_peer", "exit_codes",
               "preload", "env", "command"]


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(CSV_COLUMNS)
        for r in rows:
            m = r["metrics"]
            wr.writerow([r["name"], r["kind"], r["status"], r["check"]] +
                        [csv_value(m.get(c)) for c in CSV_COLUMNS[4:15]] +
                        [" ".join(str(c) for c in r.get("exit_codes") or []),
                         r["preload"] or "", " ".join(f"{k}={v}" for k, v in r["env"].items()),
                         r.get("command", "")])


def report(rows, meta, outdir):
    """Writes results.{json,csv,md,png} into outdir; returns the file names."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    keep = ("name", "kind", "preload", "env", "status", "message", "check", "command",
            "hyperfine_command", "times", "user_sys", "rss_kb", "exit_codes", "digests",
            "rounds", "metrics")
    (outdir / "results.json").write_text(json.dumps(
        {"meta": meta, "results": [{k: r.get(k) for k in keep} for r in rows]}, indent=1))
    write_csv(outdir / "results.csv", rows)
    (outdir / "results.md").write_text(
        f"# hakmem compare\n\n`{meta['command']}` — {meta['runs']} runs, "
        f"{meta['warmup']} warm-up, {meta['date']}\n\n" + markdown_table(rows))
    names = [r["name"] for r in rows if r["status"] == "ok"]
    colors = dict(COLORS)
    extra = iter(EXTRA_COLORS * 4)
    for n in names:
        colors.setdefault(n, next(extra))
    label = meta["command"] if len(meta["command"]) <= 40 else meta["command"][:37] + "..."
    vals = {r["name"]: r["metrics"] for r in rows if r["status"] == "ok"}
    panels = [
        dict(file="plot_time.dat", ylabel="median wall time / glibc  (lower is better)",
             groups=[(label, {n: vals[n].get("time_vs_glibc") for n in names})]),
        dict(file="plot_rss.dat", ylabel="peak RSS / glibc  (lower is better)",
             groups=[(label, {n: vals[n].get("rss_vs_glibc") for n in names})]),
    ]
    files = ["results.json", "results.csv", "results.md"]
    png = write_plot(outdir, "results.png", panels, names, colors,
                     f"hakmem compare — {meta['date']}", size=(1100, 900)) if names else None
    if png:
        files.append("results.png")
    return files


def run_compare(args, cmd, rows, tmpdir):
    """Runs every row args.runs times, interleaved; fills times, user_sys,
    rss_kb, exit_codes and digests of each row."""
    have_time = os.access(TIME_PROGRAM, os.X_OK)
    henv = clean_environ(locale_c=False)
    total = sum(1 for r in rows if r["status"] == "ok") * args.runs
    done = [0]
    for i, r in enumerate(rows):
        r["dir"] = Path(tmpdir) / f"row{i}"
        r["dir"].mkdir()
        inner = shlex.split(shell_cmd(({"LD_PRELOAD": r["preload"]} if r["preload"] else {})
                                      | r["env"], cmd))
        if have_time:
            inner = [TIME_PROGRAM, "-q", "-a", "-o", str(r["dir"] / "rss"), "-f",
                     RSS_MARK + " %M"] + inner
        r["command"] = shlex.join(inner)

    def run_one(r, rnd):
        rss_file = r["dir"] / "rss"
        if rss_file.exists():
            rss_file.unlink()
        out_file = r["dir"] / "stdout" if args.check_output else None
        res = run_hyperfine(r["name"], r["command"], args.warmup if rnd == 0 else 0, 1,
                            args.timeout, r["dir"], henv, ignore_failure=True,
                            prepare=args.prepare, output=out_file)
        r["hyperfine_command"] = res["hyperfine_command"]
        done[0] += 1
        head = f"[{done[0]:3d}/{total}] round {rnd + 1}/{args.runs}  {r['name']:<14s}"
        if res["status"] != "ok":
            r.update(status=res["status"], message=res["message"])
            log(f"{head} {res['status']}: {res['message']}")
            return
        hf = res["hyperfine"]
        rss = read_rss(rss_file) if have_time else None
        add_round(r, hf, rss, file_digest(out_file) if out_file is not None else None)
        codes = hf.get("exit_codes") or []
        log(f"{head} {fmt(hf.get('median'), '.3f')} s  "
            + (f"{rss / 1024:8.1f} MiB" if rss is not None else "  RSS n/a")
            + (f"  exit {codes[-1]}" if codes and codes[-1] != 0 else ""))

    run_interleaved(rows, args.runs, run_one)
    return have_time


def hyperfine_version():
    try:
        return subprocess.run(["hyperfine", "--version"], capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser, args, cmd = parse_args(argv)
    except UsageError as e:
        log(f"hakmem compare: {e} (see hakmem compare --help)")
        return 2
    if args.help:
        parser.print_help()
        return 0
    if not shutil.which("hyperfine"):
        log("hakmem compare: hyperfine not found (apt-get install hyperfine)")
        return 2
    rows = resolve_rows(args)
    for r in rows:
        if r["missing"]:
            log(f"hakmem compare: {r['name']}: skipped: {r['missing']}")
    command = shlex.join(cmd)
    started = time.time()
    log(f"hakmem compare: {command}")
    log(f"  {args.runs} runs + {args.warmup} warm-up per allocator, interleaved; "
        + ", ".join(r["name"] for r in rows if r["status"] == "ok"))
    try:
        with tempfile.TemporaryDirectory(prefix="hakmem-compare-") as tmpdir:
            have_rss = run_compare(args, cmd, rows, tmpdir)
    except KeyboardInterrupt:
        log("hakmem compare: interrupted")
        return 130
    if not have_rss:
        log(f"hakmem compare: {TIME_PROGRAM} not found: no peak RSS (apt-get install time)")
    for r in rows:
        r["metrics"] = row_metrics(r)
        r.pop("dir", None)
    add_checks(rows, args.check_output)
    add_ratios(rows)
    meta = {"command": command, "argv": cmd, "runs": args.runs, "warmup": args.warmup,
            "prepare": args.prepare, "check_output": args.check_output,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "elapsed_s": round(time.time() - started, 3), "hyperfine": hyperfine_version(),
            "cpus": os.cpu_count(), "kernel": platform.release(), "loadavg": os.getloadavg()}
    print()
    print(f"{command}  ({args.runs} runs each, median; ratios below 1.00 are faster/leaner)")
    print(text_table(rows), end="")
    m = next((r["metrics"] for r in rows if r.get("metrics")), {})
    if m.get("best_peer"):
        print(f"best peer: {m['best_peer']} (time); leanest peer: {m['leanest_peer']} (peak RSS); "
              "spread: (max - min) / median of the runs' wall time")
    bad = [r for r in rows if r["check"] not in ("ok", "missing")]
    if args.out:
        files = report(rows, meta, args.out)
        log(f"hakmem compare: wrote {', '.join(files)} in {args.out}")
    if bad:
        log("hakmem compare: " + "; ".join(f"{r['name']}: {r['check']}" for r in bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
