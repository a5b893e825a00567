"""`hakmem compare [OPTIONS] -- CMD [ARGS...]`: options, the rows to run,
the runs, the table and the exit status.
"""

import argparse
import datetime
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import measure, peers
from .measure import TIME_PROGRAM
from .output import fmt, log
from .report import add_checks, add_ratios, new_row, report, row_metrics, text_table
from .run import clean_environ, run_interleaved


BUILTIN = peers.PEERS + ["hakmem"]

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
    # tools/hakmem_compare/ in a source tree: its build/src
    build = Path(__file__).resolve().parent.parent.parent / "build" / "src"
    for f in ("libhakmem.so.0", "libhakmem.so"):
        if (build / f).is_file():
            return str(build / f)
    cache = peers.ldconfig_paths()
    return cache.get("libhakmem.so.0") or cache.get("libhakmem.so")


def discover_peers(ldcache=None, dirs=None):
    """One entry per peer: name, kind 'peer', preload (path or None for
    glibc), missing (why it cannot run, or None)."""
    if ldcache is None:
        ldcache = peers.ldconfig_paths()
    out = [new_row("glibc", "peer")]
    for name in peers.PEERS[1:]:
        path = peers.find_peer(name, ldcache, dirs)
        out.append(new_row(name, "peer", path,
                           missing=None if path else peers.peer_missing_message(name)))
    return out


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


def run_compare(args, cmd, rows, tmpdir):
    """Runs every row args.runs times, interleaved; fills times, user_sys,
    rss_kb, exit_codes and digests of each row."""
    with_rss = measure.have_time()
    henv = clean_environ(locale_c=False)
    total = sum(1 for r in rows if r["status"] == "ok") * args.runs
    done = [0]
    for i, r in enumerate(rows):
        measure.setup_row(r, cmd, Path(tmpdir) / f"row{i}", with_rss)

    def run_one(r, rnd):
        res, rss = measure.run_round(r, args.warmup if rnd == 0 else 0, args.timeout, henv,
                                     prepare=args.prepare, check_output=args.check_output)
        done[0] += 1
        head = f"[{done[0]:3d}/{total}] round {rnd + 1}/{args.runs}  {r['name']:<14s}"
        if res["status"] != "ok":
            log(f"{head} {res['status']}: {res['message']}")
            return
        hf = res["hyperfine"]
        codes = hf.get("exit_codes") or []
        log(f"{head} {fmt(hf.get('median'), '.3f')} s  "
            + (f"{rss / 1024:8.1f} MiB" if rss is not None else "  RSS n/a")
            + (f"  exit {codes[-1]}" if codes and codes[-1] != 0 else ""))

    run_interleaved(rows, args.runs, run_one)
    return with_rss


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
