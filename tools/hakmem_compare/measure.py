"""One row's runs of a command: the peak-RSS wrapper around it, one
interleaved round through hyperfine, the digest of its output. Used by
`hakmem compare` (cli.py) and by bench/run's whole-program workloads.
"""

import hashlib
import os
import shlex
from pathlib import Path

from .report import add_round
from .run import run_hyperfine, shell_cmd


# Written by the peak-RSS wrapper (/usr/bin/time -f) into its own file, so
# that the command's stdout and stderr stay the command's. GNU time's %M is
# the largest resident set of the command and of every child it waited for
# (gcc's cc1 and as), as wait4 reports it.
RSS_MARK = "hakmem-compare-maxrss-kb"

TIME_PROGRAM = "/usr/bin/time"


def have_time():
    return os.access(TIME_PROGRAM, os.X_OK)


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


def setup_row(row, argv, rowdir, with_rss):
    """Gives row (report.new_row) its directory and its command: argv with
    the row's LD_PRELOAD and settings, inside the peak-RSS wrapper when
    with_rss."""
    row["dir"] = Path(rowdir)
    row["dir"].mkdir(parents=True, exist_ok=True)
    inner = shlex.split(shell_cmd(({"LD_PRELOAD": row["preload"]} if row["preload"] else {})
                                  | row["env"], argv))
    if with_rss:
        inner = [TIME_PROGRAM, "-q", "-a", "-o", str(row["dir"] / "rss"), "-f",
                 RSS_MARK + " %M"] + inner
    row["command"] = shlex.join(inner)


def run_round(row, warmup, timeout, henv, prepare=None, check_output=False,
              digest_path=None):
    """One timed run (after `warmup` untimed ones) of a row set up by
    setup_row, added to the row (add_round) with its peak RSS and the
    digest of its stdout (check_output) or of the file digest_path. On a
    failure of hyperfine itself the row's status and message say so.
    Returns run.run_hyperfine's record and the peak RSS (KiB or None)."""
    rss_file = row["dir"] / "rss"
    if rss_file.exists():
        rss_file.unlink()
    out_file = row["dir"] / "stdout" if check_output else None
    res = run_hyperfine(row["name"], row["command"], warmup, 1, timeout, row["dir"], henv,
                        ignore_failure=True, prepare=prepare, output=out_file)
    row["hyperfine_command"] = res["hyperfine_command"]
    if res["status"] != "ok":
        row.update(status=res["status"], message=res["message"])
        return res, None
    rss = read_rss(rss_file)
    digest = None
    if digest_path is not None:
        digest = file_digest(digest_path)
    elif out_file is not None:
        digest = file_digest(out_file)
    add_round(row, res["hyperfine"], rss, digest)
    return res, rss
