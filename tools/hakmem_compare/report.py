"""`hakmem compare`'s rows and report: per-run figures, medians, the check
against glibc's runs, ratios, the table and results.{json,csv,md,png}.
"""

import csv
import json
from pathlib import Path

from .arith import median, pick, ratio, spread_pct
from .output import csv_value, fmt, mib, write_plot
from .peers import PEERS


COLORS = {
    "glibc": "#7f7f7f", "mimalloc": "#4e79a7", "jemalloc": "#59a14f", "tcmalloc": "#9c755f",
    "hakmem": "#e15759",
}

EXTRA_COLORS = ["#f28e2b", "#edc948", "#76b7b2", "#d37295", "#bab0ac", "#ff9d9a", "#b07aa1"]


def new_row(name, kind, preload=None, env=None, missing=None):
    return dict(name=name, kind=kind, preload=preload, env=env or {}, missing=missing,
                required=kind != "peer" or name == "glibc",
                status="missing" if missing else "ok", message=missing or "",
                times=[], user_sys=[], rss_kb=[], exit_codes=[], digests=[], rounds=[])


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


def row_metrics(row):
    """Medians, spread and the per-run lists of one row."""
    times = row.get("times") or []
    m = {"runs": len(times), "median_s": median(times),
         "min_s": min(times) if times else None, "max_s": max(times) if times else None,
         "spread_pct": spread_pct(times),
         "user_sys_s": median(row.get("user_sys") or []),
         "peak_rss_kb": median(row.get("rss_kb") or [])}
    return m


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
