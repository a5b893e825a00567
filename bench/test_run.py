"""Unit tests of bench/run's arithmetic: the peak RSS target and the
standing table's verdict on it.

    python3 -m unittest discover -s bench -p 'test_*.py'
"""

import importlib.machinery
import importlib.util
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


if __name__ == "__main__":
    unittest.main()
