"""Medians, ratios and spreads, None where there is nothing to divide.
"""

import statistics


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


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
