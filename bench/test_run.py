"""Unit tests of bench/run: the peak RSS target and the standing table's
verdict on it; the whole-program workloads (their definitions, the
substitutions, and real runs of small commands through hyperfine: the
setup and prepare steps, the output check, a RESULT line, a missing
program).

    python3 -m unittest discover -s bench -p 'test_*.py'
"""

import importlib.machinery
import importlib.util
import os
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

_path = Path(__file__).resolve().parent / "run"
_loader = importlib.machinery.SourceFileLoader("bench_run", str(_path))
_spec = importlib.util.spec_from_loader("bench_run", _loader)
run = importlib.util.module_from_spec(_spec)
_loader.exec_module(run)


class PeakTarget(unittest.TestCase):
    def test_ratio_rules_above_2560_kib(self):
        # 1.10 x 10,000 = 11,000 > 10,000 + 256
        self.assertAlmostEqual(run.peak_limit_kb(10000), 11000)
        self.assertTrue(run.peak_meets_target(11000, 10000))
        self.assertFalse(run.peak_meets_target(11001, 10000))

    def test_slack_rules_below_2560_kib(self):
        # 2,000 + 256 = 2,256 > 1.10 x 2,000 = 2,200
        self.assertEqual(run.peak_limit_kb(2000), 2256)
        self.assertTrue(run.peak_meets_target(2256, 2000))
        self.assertTrue(run.peak_meets_target(2230, 2000))   # 1.115: over 1.10, within 256 KiB
        self.assertFalse(run.peak_meets_target(2257, 2000))

    def test_both_rules_meet_at_2560_kib(self):
        self.assertAlmostEqual(run.peak_limit_kb(2560), 2816)
        self.assertTrue(run.peak_meets_target(2816, 2560))
        self.assertFalse(run.peak_meets_target(2817, 2560))

    def test_target_text(self):
        self.assertEqual(run.peak_target_text(10000), "<= 1.10")
        self.assertEqual(run.peak_target_text(None), "<= 1.10")
        self.assertEqual(run.peak_target_text(2000), "<= 1.128 (+256 KiB)")


def _result(allocator, peak_kb, ops_per_sec=1e6):
    return {"workload": "random_mixed", "allocator": allocator, "status": "ok",
            "metrics": {"ops_per_sec": ops_per_sec, "peak_rss_kb": peak_kb}}


class StandingTable(unittest.TestCase):
    """add_ratios then standing_table, as the runner does."""

    def verdict(self, hakmem_kb, lean_kb):
        results = [_result("glibc", lean_kb), _result("mimalloc", lean_kb + 5000),
                   _result("hakmem", hakmem_kb)]
        run.add_ratios(results)
        table = run.standing_table(results, [{"name": "random_mixed"}])
        row = next(l for l in table.splitlines() if l.startswith("| random_mixed "))
        return row.split(" | ")[3], table

    def test_within_slack_meets(self):
        peak, table = self.verdict(2900, 2692)   # 1.078, +208 KiB
        self.assertEqual(peak, "1.078")
        self.assertIn("Every ratio meets its target", table)

    def test_over_ratio_within_slack_meets(self):
        peak, table = self.verdict(1900, 1700)   # 1.118, +200 KiB
        self.assertEqual(peak, "1.118")
        self.assertIn("<= 1.151 (+256 KiB)", table)
        self.assertIn("Every ratio meets its target", table)

    def test_over_both_misses(self):
        peak, table = self.verdict(1960, 1700)   # 1.153, +260 KiB
        self.assertEqual(peak, "**1.153**")
        self.assertIn("1 ratio(s) miss their target", table)

    def test_over_ratio_large_program_misses(self):
        peak, table = self.verdict(11100, 10000)   # 1.11, +1,100 KiB
        self.assertEqual(peak, "**1.110**")
        self.assertIn("1 ratio(s) miss their target", table)


def _allocator(name, preload=None, kind="peer", env=None, missing=None):
    return dict(name=name, kind=kind, preload=preload, env=env or {}, missing=missing,
                linked=False)


def _libm():
    """A library harmless to preload: stands in for another allocator."""
    for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64",
              "/usr/lib", "/lib"):
        p = os.path.join(d, "libm.so.6")
        if os.path.exists(p):
            return p
    return None


def _program(**kw):
    w = dict(name="fake", program=True, linked=False, kind="speed", what="a fake program",
             op="run of the program", unit="runs/s", needs={sys.executable: "python3"},
             quick=[], default=[], profile=None)
    w.update(kw)
    return w


class ProgramWorkloads(unittest.TestCase):
    def test_definitions(self):
        progs = {w["name"]: w for w in run.WORKLOADS if w.get("program")}
        self.assertEqual(sorted(progs), ["gcc", "python3", "redis", "sqlite3"])
        for name, w in progs.items():
            self.assertIn(name, run.SPEED_TARGET_WORKLOADS)
            self.assertTrue(w["needs"] and w["cmd"] and w["what"])
            self.assertFalse(w["linked"])
            for word in w["cmd"] + w.get("setup", []):
                if "{programs}/" in word:
                    path = word.split("{programs}/")[1].split()[0]
                    self.assertTrue((run.PROGRAMS_DIR / path).is_file(), path)
        # only redis gives the allocator to a child of its own
        self.assertEqual([n for n, w in progs.items() if "{server_env}" in w["cmd"]], ["redis"])

    def test_words(self):
        words = run.program_words(["{programs}/x.py", "{tmp}/a.db", "{server_env}", ".read {tmp}/s"],
                                  "/T", [("LD_PRELOAD", "/l.so"), ("HAKMEM_FRONT", "none")])
        self.assertEqual(words, [str(run.PROGRAMS_DIR / "x.py"), "/T/a.db", "LD_PRELOAD=/l.so",
                                 "HAKMEM_FRONT=none", ".read /T/s"])
        self.assertEqual(run.program_words(["a", "{server_env}"], "/T"), ["a"])
        sqlite = next(w for w in run.WORKLOADS if w["name"] == "sqlite3")
        self.assertEqual(run.workload_command_text(sqlite, "default"),
                         "/usr/bin/sqlite3 $TMP/rows.db '.read bench/programs/sqlite_rows.sql'")

    def test_throughput_units(self):
        redis = next(w for w in run.WORKLOADS if w["name"] == "redis")
        self.assertEqual(run.throughput_text(redis, 81234.5), "81.23 k req/s")
        self.assertEqual(run.throughput_text(_program(), 0.5), "0.50 runs/s")
        self.assertEqual(run.throughput_text({"name": "random_mixed"}, 2.5e6), "2.50")

    def test_allocators_of_programs(self):
        allocs = [_allocator(n) for n in run.PEERS] + [
            _allocator("hakmem", kind="hakmem"), _allocator("hakmem:front=none", kind="hakmem"),
            dict(_allocator("hakmem-linked", kind="hakmem"), linked=True)]
        self.assertEqual([a["name"] for a in run.program_allocators(allocs, False)],
                         run.PEERS + ["hakmem"])
        self.assertEqual(len(run.program_allocators(allocs, True)), 6)   # -a: all but linked

    def test_quick_mode_runs_programs_only_when_named(self):
        names = lambda ws: [w["name"] for w in ws]  # noqa: E731
        quick = names(run.mode_workloads(run.WORKLOADS, "quick", False))
        self.assertIn("random_mixed", quick)
        self.assertNotIn("python3", quick)
        self.assertIn("python3", names(run.mode_workloads(run.WORKLOADS, "quick", True)))
        self.assertEqual(names(run.mode_workloads(run.WORKLOADS, "default", False)),
                         names(run.WORKLOADS))

    def test_missing_program_is_skipped(self):
        w = _program(needs={"/nonexistent/bin/prog": "prog-package"}, cmd=["/nonexistent/bin/prog"])
        with tempfile.TemporaryDirectory() as d:
            recs, rounds = run.run_program(
                w, [_allocator("glibc"), _allocator("hakmem", kind="hakmem")], [], 1, 30, d)
        self.assertEqual([r["status"] for r in recs], ["missing", "missing"])
        self.assertEqual(rounds, 0)
        self.assertEqual(recs[0]["message"],
                         "skipped: /nonexistent/bin/prog not found (apt-get install prog-package)")
        self.assertEqual(recs[1]["runs"], [])


@unittest.skipUnless(shutil.which("hyperfine"), "hyperfine not installed")
class ProgramRuns(unittest.TestCase):
    """run_program on small Python commands, two runs per row."""

    def run_fake(self, w, allocators=None, budget_s=0.0):
        with tempfile.TemporaryDirectory() as d:
            recs, self.rounds = run.run_program(
                w, allocators or [_allocator("glibc")], [], 2, 60, d, budget_s)
            return {r["allocator"]: r for r in recs}

    def test_short_program_gets_more_rounds(self):
        # a round far shorter than the budget: MAX_ROUNDS_FACTOR times the
        # runs asked for; without a budget, exactly those
        w = _program(cmd=[sys.executable, "-c", "print(1)"], check="stdout")
        rec = self.run_fake(w, budget_s=3600.0)["glibc"]
        self.assertEqual(self.rounds, 2 * run.MAX_ROUNDS_FACTOR)
        self.assertEqual(len(rec["runs"]), 2 * run.MAX_ROUNDS_FACTOR)
        rec = self.run_fake(w)["glibc"]
        self.assertEqual((self.rounds, len(rec["runs"])), (2, 2))
        # a budget smaller than one round: the runs asked for, no fewer
        rec = self.run_fake(w, budget_s=0.001)["glibc"]
        self.assertEqual((self.rounds, len(rec["runs"])), (2, 2))

    def test_setup_prepare_and_runs(self):
        # setup writes a file once; prepare puts a marker before every run,
        # which the run consumes: a run without its prepare step fails
        code = ("import os, sys; t = sys.argv[1]; os.remove(t + '/marker'); "
                "print(open(t + '/input').read())")
        w = _program(setup=[sys.executable, "-c",
                            "import sys; open(sys.argv[1] + '/input', 'w').write('42')", "{tmp}"],
                     prepare="echo > {tmp}/marker", cmd=[sys.executable, "-c", code, "{tmp}"],
                     check="stdout")
        rec = self.run_fake(w)["glibc"]
        self.assertEqual((rec["status"], rec["message"]), ("ok", ""))
        self.assertEqual(len(rec["runs"]), 2)
        for r in rec["runs"]:
            self.assertEqual(r["ops"], 1)
            self.assertAlmostEqual(r["ops_per_sec"], 1 / r["seconds"])
            if os.access("/usr/bin/time", os.X_OK):
                self.assertGreater(r["peak_rss_kb"], 1000)
        self.assertIn("--prepare", rec["hyperfine_command"])
        m = run.summarize(dict(rec, hyperfine=run.merge_hyperfine(rec["rounds"])))
        self.assertGreater(m["ops_per_sec"], 0)
        # without the prepare step the second run finds no marker
        rec = self.run_fake(dict(w, prepare="true"))["glibc"]
        self.assertEqual(rec["status"], "failed")

    def test_failing_setup_fails_every_row(self):
        w = _program(setup=[sys.executable, "-c", "raise SystemExit('no input')"],
                     cmd=[sys.executable, "-c", "pass"])
        recs = self.run_fake(w, [_allocator("glibc"), _allocator("other")])
        self.assertEqual({r["status"] for r in recs.values()}, {"failed"})
        self.assertIn("setup failed: no input", recs["other"]["message"])

    def test_output_differing_from_glibc_fails_the_row(self):
        lib = _libm()
        if not lib:
            self.skipTest("no libm.so.6 to stand in for another allocator")
        code = "import os; print('other' if 'libm' in os.environ.get('LD_PRELOAD', '') else 'same')"
        allocs = [_allocator("glibc"), _allocator("mimalloc", lib)]
        recs = self.run_fake(_program(cmd=[sys.executable, "-c", code], check="stdout"), allocs)
        self.assertEqual(recs["glibc"]["status"], "ok")
        self.assertEqual((recs["mimalloc"]["status"], recs["mimalloc"]["message"]),
                         ("failed", "stdout differs from glibc's"))
        self.assertIn("LD_PRELOAD=" + lib, recs["mimalloc"]["command"])
        # a file the program writes, checked instead of stdout
        code = ("import os, sys; open(sys.argv[1] + '/out', 'w')"
                ".write(os.environ.get('LD_PRELOAD', ''))")
        recs = self.run_fake(_program(cmd=[sys.executable, "-c", code, "{tmp}"],
                                      check="file:{tmp}/out"), allocs)
        self.assertEqual(recs["mimalloc"]["message"], "stdout differs from glibc's")
        # without a check only the exit status counts
        recs = self.run_fake(_program(cmd=[sys.executable, "-c", code, "{tmp}"]), allocs)
        self.assertEqual(recs["mimalloc"]["status"], "ok")

    def test_result_line_and_server_env(self):
        # the allocator settings reach the command as words, not as its
        # environment, and its RESULT line gives the throughput and RSS
        code = ("import os, sys; env = [a for a in sys.argv[1:] if '=' in a]; "
                "assert 'LD_PRELOAD' not in os.environ; "
                "open(os.environ['BENCH_RESULT_FILE'], 'a').write("
                "'RESULT workload=x ops=%d seconds=1 ops_per_sec=%d peak_rss_kb=777\\n' "
                "% (len(env), 1000 + len(env)))")
        w = _program(cmd=[sys.executable, "-c", code, "{server_env}"], result_line=True)
        recs = self.run_fake(w, [_allocator("glibc"), _allocator("hakmem", "/x/libhakmem.so",
                                                                 "hakmem", {"HAKMEM_FRONT": "none"})])
        self.assertEqual(recs["glibc"]["status"], "ok", recs["glibc"]["message"])
        self.assertEqual([r["ops_per_sec"] for r in recs["glibc"]["runs"]], [1000, 1000])
        self.assertEqual([r["ops_per_sec"] for r in recs["hakmem"]["runs"]], [1002, 1002])
        self.assertEqual(recs["hakmem"]["runs"][0]["peak_rss_kb"], 777)
        self.assertIn("LD_PRELOAD=/x/libhakmem.so HAKMEM_FRONT=none", recs["hakmem"]["command"])
        # no RESULT line: the row fails
        recs = self.run_fake(dict(w, cmd=[sys.executable, "-c", "pass"]))
        self.assertEqual((recs["glibc"]["status"], recs["glibc"]["message"]),
                         ("failed", "no RESULT line"))


if __name__ == "__main__":
    unittest.main()
