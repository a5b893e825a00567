"""Run a command under several allocators with hyperfine and report.

Two users, one code path:
  - `hakmem compare [OPTIONS] -- CMD [ARGS...]` (cli.py; tools/hakmem runs
    this package): the user's command under glibc, mimalloc, jemalloc,
    tcmalloc, hakmem and any --with / --lib rows, interleaved; a table of
    wall time, user+sys, peak RSS, ratios and spread; every run's exit
    status (and stdout) checked against glibc's; --out DIR writes
    results.{json,csv,md,png}.
  - bench/run (the project's benchmark runner) imports the shared parts:
    peers.py (discovery), run.py (hyperfine, interleaved rounds), arith.py
    (medians, ratios), output.py (cells, CSV values, the gnuplot plot), and
    for its whole programs (python3, sqlite3, gcc, redis) the rows of
    `hakmem compare` itself: measure.py (the peak-RSS wrapper, one round
    of a row, output digests) and report.py's rows and output check.

Python 3 standard library only. Installed as <datadir>/hakmem/hakmem_compare/.
"""
