"""Tests of `hakmem compare` (tools/hakmem_compare/ and the launcher).

    python3 -m unittest discover -s tools -p 'test_*.py'
    meson test -C build --suite compare

The runs need hyperfine (skipped without it); HAKMEM_LIB names the library
of the hakmem rows (meson test sets it to the build's).
"""

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hakmem_compare import cli, measure, peers, report  # noqa: E402

HAVE_HYPERFINE = shutil.which("hyperfine") is not None
HAKMEM_LIB = os.environ.get("HAKMEM_LIB") or cli.default_hakmem_lib()


def some_library():
    """A shared library that is harmless to preload: stands in for a peer."""
    path = peers.ldconfig_paths().get("libm.so.6")
    if path and os.path.exists(path):
        return path
    for d in peers.peer_dirs():
        if os.path.exists(os.path.join(d, "libm.so.6")):
            return os.path.join(d, "libm.so.6")
    return None


def compare(argv):
    """main(argv) -> (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


class Options(unittest.TestCase):
    def test_all_options(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as lib:
            _, a, cmd = cli.parse_args([
                "--runs", "3", "--warmup", "0", "--prepare", "sync; true",
                "--with", "nofront=HAKMEM_FRONT=none,HAKMEM_POOL=none",
                "--with", "x=A=b=c", "--lib", f"old={lib.name}", "--check-output",
                "--out", "/tmp/o", "--allocators", "glibc,hakmem", "--timeout", "9",
                "--", "sort", "-S", "30M", "--", "big.txt"])
            self.assertEqual(cmd, ["sort", "-S", "30M", "--", "big.txt"])
            self.assertEqual((a.runs, a.warmup, a.prepare, a.out, a.timeout),
                             (3, 0, "sync; true", "/tmp/o", 9.0))
            self.assertEqual(a.withs, [("nofront", {"HAKMEM_FRONT": "none",
                                                    "HAKMEM_POOL": "none"}),
                                       ("x", {"A": "b=c"})])
            self.assertEqual(a.libs, [("old", os.path.abspath(lib.name))])
            self.assertTrue(a.check_output)
            self.assertEqual(a.selected, ["glibc", "hakmem"])

    def test_defaults_and_command_without_double_dash(self):
        _, a, cmd = cli.parse_args(["--runs", "2", "sort", "-S", "30M", "f"])
        self.assertEqual(cmd, ["sort", "-S", "30M", "f"])
        self.assertEqual((a.runs, a.warmup, a.check_output, a.out), (2, 1, False, None))
        self.assertEqual(a.selected, cli.BUILTIN)
        _, a, _ = cli.parse_args(["true"])
        self.assertEqual(a.runs, 5)

    def test_errors(self):
        bad = [
            [],                                        # no command
            ["--runs", "2", "--"],                     # no command after --
            ["--runs", "0", "--", "true"],
            ["--runs", "x", "--", "true"],
            ["--warmup", "-1", "--", "true"],
            ["--with", "nofront", "--", "true"],       # no VAR=VALUE
            ["--with", "nofront=HAKMEM_FRONT", "--", "true"],
            ["--with", "a=1X=y", "--", "true"],        # not a variable name
            ["--with", "glibc=A=b", "--", "true"],     # name taken
            ["--with", "a=A=b", "--with", "a=B=c", "--", "true"],
            ["--lib", "old=/nonexistent/libhakmem.so", "--", "true"],
            ["--lib", "/path/without/name.so", "--", "true"],
            ["--allocators", "glibc,ptmalloc", "--", "true"],
            ["--bogus", "--", "true"],
        ]
        for argv in bad:
            with self.subTest(argv=argv):
                with self.assertRaises(cli.UsageError):
                    cli.parse_args(argv)
                rc, out, err = compare(argv)
                self.assertEqual(rc, 2)
                self.assertIn("hakmem compare:", err)
                self.assertEqual(out, "")

    def test_help(self):
        rc, out, _ = compare(["--help"])
        self.assertEqual(rc, 0)
        for opt in ("--runs", "--warmup", "--prepare", "--with", "--lib", "--check-output",
                    "--out"):
            self.assertIn(opt, out)


class Peers(unittest.TestCase):
    def test_missing_peer_names_debian_package(self):
        with tempfile.TemporaryDirectory() as empty:
            rows = cli.discover_peers(ldcache={}, dirs=[empty])
        self.assertEqual([r["name"] for r in rows], peers.PEERS)
        self.assertIsNone(rows[0]["missing"])           # glibc is always there
        msgs = {r["name"]: r["missing"] for r in rows[1:]}
        self.assertEqual(msgs["mimalloc"],
                         "mimalloc not installed (apt-get install libmimalloc2.0)")
        self.assertIn("apt-get install libjemalloc2", msgs["jemalloc"])
        self.assertIn("apt-get install libtcmalloc-minimal4", msgs["tcmalloc"])

    def test_peer_found_in_dir_and_cache(self):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "libjemalloc.so.2").write_bytes(b"")
            rows = {r["name"]: r for r in cli.discover_peers(
                ldcache={"libmimalloc.so.2": os.path.join(d, "libjemalloc.so.2")}, dirs=[d])}
            self.assertEqual(rows["jemalloc"]["preload"], os.path.join(d, "libjemalloc.so.2"))
            self.assertEqual(rows["mimalloc"]["preload"], os.path.join(d, "libjemalloc.so.2"))
            self.assertIsNotNone(rows["tcmalloc"]["missing"])

    def test_missing_hakmem_is_a_failure(self):
        _, a, _ = cli.parse_args(["--allocators", "glibc,hakmem", "--with", "n=A=1",
                                 "--hakmem-lib", "/nonexistent/libhakmem.so", "--", "true"])
        rows = cli.resolve_rows(a, ldcache={}, peer_libdirs=[])
        self.assertEqual([r["status"] for r in rows], ["ok", "missing", "missing"])
        for r in rows[1:]:
            self.assertIn("/nonexistent/libhakmem.so", r["message"])
        rows[0]["status"] = "missing"   # glibc not run either: nothing to judge by
        report.add_checks(rows, False)
        self.assertEqual(rows[1]["check"], "missing (required)")


class Report(unittest.TestCase):
    """The arithmetic, from recorded hyperfine results (test_compare_hyperfine.json)."""

    def setUp(self):
        data = json.loads((HERE / "test_compare_hyperfine.json").read_text())
        self.rows = []
        for spec in data["rows"]:
            row = report.new_row(spec["name"], spec["kind"])
            for hf, rss in zip(spec["rounds"], spec["rss_kb"]):
                report.add_round(row, hf["results"][0], rss)
            row["metrics"] = report.row_metrics(row)
            self.rows.append(row)
        report.add_checks(self.rows, False)
        report.add_ratios(self.rows)
        self.by = {r["name"]: r for r in self.rows}

    def m(self, name):
        return self.by[name]["metrics"]

    def test_medians_and_spread(self):
        self.assertAlmostEqual(self.m("glibc")["median_s"], 1.1)
        self.assertAlmostEqual(self.m("glibc")["user_sys_s"], 1.05)
        self.assertEqual(self.m("glibc")["peak_rss_kb"], 10240)
        self.assertAlmostEqual(self.m("glibc")["spread_pct"], 0.2 / 1.1 * 100)
        self.assertAlmostEqual(self.m("hakmem")["median_s"], 0.72)
        self.assertAlmostEqual(self.m("hakmem")["user_sys_s"], 0.67)
        self.assertEqual(self.m("hakmem")["peak_rss_kb"], 12288)
        self.assertEqual(self.m("hakmem")["runs"], 3)

    def test_failed_run_is_flagged_and_not_a_best_peer(self):
        self.assertEqual(self.by["tcmalloc"]["check"], "exit 0/1; glibc exits 0")
        for name in ("glibc", "mimalloc", "jemalloc", "hakmem"):
            self.assertEqual(self.by[name]["check"], "ok")
        # tcmalloc is fastest and leanest, but one of its runs failed
        self.assertEqual(self.m("hakmem")["best_peer"], "mimalloc")
        self.assertEqual(self.m("hakmem")["leanest_peer"], "glibc")

    def test_ratios(self):
        h = self.m("hakmem")
        self.assertAlmostEqual(h["time_vs_glibc"], 0.72 / 1.1)
        self.assertAlmostEqual(h["time_vs_best_peer"], 0.8)
        self.assertAlmostEqual(h["rss_vs_glibc"], 1.2)
        self.assertAlmostEqual(h["rss_vs_leanest_peer"], 1.2)
        self.assertAlmostEqual(self.m("glibc")["time_vs_best_peer"], 1.1 / 0.9)
        self.assertAlmostEqual(self.m("mimalloc")["rss_vs_glibc"], 2.0)
        self.assertAlmostEqual(self.m("glibc")["time_vs_glibc"], 1.0)

    def test_table_and_files(self):
        table = report.text_table(self.rows)
        line = next(x for x in table.splitlines() if x.startswith("hakmem "))
        for cell in ("0.720 s", "0.670 s", "12.0 MiB", "0.65", "0.80", "1.20", "ok"):
            self.assertIn(cell, line)
        self.assertIn("exit 0/1; glibc exits 0", table)
        meta = {"command": "prog arg", "runs": 3, "warmup": 1, "date": "today"}
        with tempfile.TemporaryDirectory() as d:
            files = report.report(self.rows, meta, d)
            self.assertEqual(files[:3], ["results.json", "results.csv", "results.md"])
            with open(Path(d, "results.csv")) as f:
                recs = {r["allocator"]: r for r in csv.DictReader(f)}
            self.assertEqual(float(recs["hakmem"]["time_vs_best_peer"]), 0.8)
            self.assertEqual(recs["tcmalloc"]["exit_codes"], "0 1 0")
            js = json.loads(Path(d, "results.json").read_text())
            self.assertEqual(js["meta"]["command"], "prog arg")
            self.assertEqual(js["results"][4]["metrics"]["peak_rss_kb"], 12288)
            self.assertIn("| hakmem | 0.720 |", Path(d, "results.md").read_text())
            if shutil.which("gnuplot"):
                self.assertIn("results.png", files)
                self.assertGreater(Path(d, "results.png").stat().st_size, 1000)

    def test_output_check(self):
        for r in self.rows:
            r["digests"] = ["a"] * 3
        self.by["jemalloc"]["digests"] = ["a", "b", "a"]
        self.by["mimalloc"]["digests"] = ["b"] * 3
        report.add_checks(self.rows, True)
        self.assertEqual(self.by["hakmem"]["check"], "ok")
        self.assertEqual(self.by["mimalloc"]["check"], "stdout differs from glibc's")
        self.assertEqual(self.by["jemalloc"]["check"],
                         "stdout varies between runs; stdout differs from glibc's")


@unittest.skipUnless(HAVE_HYPERFINE, "hyperfine not installed")
class Runs(unittest.TestCase):
    """Real runs through hyperfine (short commands, two runs each)."""

    def run_compare(self, opts, cmd):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = compare(["--runs", "2", "--warmup", "0", "--out", d] + opts +
                                   ["--"] + cmd)
            js = json.loads(Path(d, "results.json").read_text())
        return rc, out, err, {r["name"]: r for r in js["results"]}

    def test_failing_command_is_reported(self):
        rc, out, err, rows = self.run_compare(["--allocators", "glibc"], ["sh", "-c", "exit 3"])
        self.assertEqual(rc, 1)
        self.assertEqual(rows["glibc"]["check"], "exit 3")
        self.assertEqual(rows["glibc"]["exit_codes"], [3, 3])
        self.assertIn("exit 3", out)
        self.assertIn("glibc: exit 3", err)

    def test_exit_status_differing_from_glibc(self):
        lib = some_library()
        if not lib:
            self.skipTest("no libm.so.6 to stand in for another allocator")
        rc, out, _, rows = self.run_compare(
            ["--allocators", "glibc", "--lib", f"other={lib}"],
            ["sh", "-c", 'case "${LD_PRELOAD:-}" in *libm*) exit 4;; esac'])
        self.assertEqual(rc, 1)
        self.assertEqual(rows["glibc"]["check"], "ok")
        self.assertEqual(rows["other"]["check"], "exit 4; glibc exits 0")

    def test_check_output_flags_a_fake_peer(self):
        lib = some_library()
        if not lib:
            self.skipTest("no libm.so.6 to stand in for a peer")
        cmd = ["sh", "-c", 'case "${LD_PRELOAD:-}" in *libm*) echo other;; *) echo same;; esac']
        with tempfile.TemporaryDirectory() as d:
            os.symlink(lib, os.path.join(d, "libmimalloc.so.2"))
            with mock.patch.object(peers, "ldconfig_paths", return_value={}), \
                    mock.patch.object(peers, "peer_dirs", return_value=[d]):
                rc, out, err, rows = self.run_compare(
                    ["--allocators", "glibc,mimalloc,jemalloc", "--check-output"], cmd)
                rc2, _, _, rows2 = self.run_compare(["--allocators", "glibc,mimalloc"], cmd)
        self.assertEqual(rc, 1)
        self.assertEqual(rows["mimalloc"]["check"], "stdout differs from glibc's")
        self.assertEqual(rows["glibc"]["check"], "ok")
        self.assertEqual(len(rows["glibc"]["digests"]), 2)
        self.assertIn("stdout differs from glibc's", out)
        # a peer that is not installed is skipped, named with its package
        self.assertEqual(rows["jemalloc"]["check"], "missing")
        self.assertIn("jemalloc: skipped: jemalloc not installed (apt-get install libjemalloc2)",
                      err)
        # without --check-output only the exit status counts
        self.assertEqual(rc2, 0)
        self.assertEqual(rows2["mimalloc"]["check"], "ok")

    @unittest.skipUnless(HAKMEM_LIB and os.path.isfile(HAKMEM_LIB), "libhakmem.so not built")
    def test_hakmem_rows(self):
        rc, out, err, rows = self.run_compare(
            ["--allocators", "glibc,hakmem", "--hakmem-lib", HAKMEM_LIB, "--check-output",
             "--with", "nofront=HAKMEM_FRONT=none", "--prepare", "true"],
            [sys.executable, "-c", "print(sum(len(str(i)) for i in range(100000)))"])
        self.assertEqual(rc, 0, err)
        self.assertEqual([rows[n]["check"] for n in ("glibc", "hakmem", "nofront")],
                         ["ok"] * 3)
        self.assertEqual(rows["nofront"]["env"], {"HAKMEM_FRONT": "none"})
        self.assertIn("LD_PRELOAD=" + HAKMEM_LIB, rows["hakmem"]["command"])
        for r in rows.values():
            self.assertEqual(len(r["times"]), 2)
            if os.access(cli.TIME_PROGRAM, os.X_OK):
                self.assertEqual(len(r["rss_kb"]), 2)
                self.assertGreater(r["metrics"]["peak_rss_kb"], 1000)
        self.assertIn("--prepare", rows["hakmem"]["hyperfine_command"])


@unittest.skipUnless(HAVE_HYPERFINE, "hyperfine not installed")
class Measure(unittest.TestCase):
    """The row runs bench/run's whole programs share with `hakmem compare`."""

    def test_setup_row_and_round_with_a_file_digest(self):
        with tempfile.TemporaryDirectory() as d:
            row = report.new_row("other", "lib", "/x/lib.so", {"HAKMEM_FRONT": "none"})
            measure.setup_row(row, ["sh", "-c", 'printf "%s" "$LD_PRELOAD" > "$0/out"', d],
                              Path(d) / "row0", False)
            self.assertEqual(row["command"], "env LD_PRELOAD=/x/lib.so HAKMEM_FRONT=none sh -c "
                             "'printf \"%s\" \"$LD_PRELOAD\" > \"$0/out\"' " + d)
            row["command"] = row["command"].replace("LD_PRELOAD=/x/lib.so", "LD_PRELOAD=")
            res, rss = measure.run_round(row, 0, 60, cli.clean_environ(), digest_path=Path(d, "out"))
            self.assertEqual(res["status"], "ok")
            self.assertIsNone(rss)   # no wrapper asked for
            self.assertEqual(row["digests"], [measure.file_digest(Path(d, "out"))])
            self.assertEqual(len(row["times"]), 1)
            if measure.have_time():
                measure.setup_row(row, ["true"], Path(d) / "row1", True)
                self.assertTrue(row["command"].startswith(measure.TIME_PROGRAM + " -q -a -o "))
                _, rss = measure.run_round(row, 1, 60, cli.clean_environ())
                self.assertGreater(rss, 100)
                self.assertEqual(len(row["times"]), 2)


class Launcher(unittest.TestCase):
    """tools/hakmem hands `compare` to this module; run and lib stay as they were."""

    def launch(self, *args):
        return subprocess.run(["sh", str(HERE / "hakmem")] + list(args), capture_output=True,
                              text=True, timeout=60)

    def test_compare_help_and_usage_error(self):
        r = self.launch("compare", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage: hakmem compare", r.stdout)
        r = self.launch("compare", "--bogus", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unrecognized arguments: --bogus", r.stderr)
        r = self.launch("--help")
        self.assertIn("compare [OPTIONS] -- CMD", r.stdout)

    @unittest.skipUnless(HAKMEM_LIB and os.path.isfile(HAKMEM_LIB), "libhakmem.so not built")
    def test_run_still_works(self):
        r = subprocess.run(["sh", str(HERE / "hakmem"), "run", "--verbose", "--", "sh", "-c",
                            "echo ok"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, HAKMEM_LIB=HAKMEM_LIB))
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, "ok\n")
        self.assertIn("hakmem:", r.stderr)


if __name__ == "__main__":
    unittest.main()
