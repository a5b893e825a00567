"""bench/run's redis workload: redis-server under test, redis-benchmark as
the load, both on 127.0.0.1.

    python3 redis_load.py [--requests N] [--keys N] [VAR=VALUE ...]

Starts redis-server at a free port without persistence (--save ''
--appendonly no) with the environment settings given (LD_PRELOAD=... for
the allocator under test: only the server gets them, not this script nor
the load generator). Debian's redis-server links jemalloc: without an
LD_PRELOAD it gets the C library's, so that the run without an allocator
is glibc's malloc. It waits until the server answers PING, runs redis-benchmark -q
for SET, GET, LPUSH, LPOP, HSET, SADD with values of 64 B and 4096 B over a
random key space, reads the server's peak RSS (VmHWM) and shuts it down.
Prints one line
  RESULT workload=redis ops=REQUESTS seconds=S ops_per_sec=REQ/S peak_rss_kb=KB ...
to $BENCH_RESULT_FILE (appended), or to stdout when that is not set.
Exit status 1 when the server does not start, a test gives no figure or the
server dies.
"""

import os
import re
import socket
import subprocess
import sys
import time

TESTS = "set,get,lpush,lpop,hset,sadd"
SIZES = [64, 4096]
RPS_RE = re.compile(r"^([A-Z][A-Z0-9_ ]*?)(?: \(.*\))?: ([0-9.]+) requests per second")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, line, timeout=2.0):
    """One inline command; its reply's first line (or None)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(line.encode() + b"\r\n")
            return s.recv(256).decode(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None


def libc_path():
    """The C library this script runs on (the same as the server's)."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libc.so"):
                return path
    return None


def vm_hwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def parse_rps(text):
    """{test: requests/s} from redis-benchmark -q output (progress lines end
    in carriage returns; the final figure of a test is its last)."""
    out = {}
    for chunk in re.split(r"[\r\n]+", text):
        m = RPS_RE.match(chunk.strip())
        if m:
            out[m.group(1).split()[0]] = float(m.group(2))
    return out


def main(argv):
    requests, keys, server_env = 10000, 10000, {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--requests", "--keys") and i + 1 < len(argv):
            if a == "--requests":
                requests = int(argv[i + 1])
            else:
                keys = int(argv[i + 1])
            i += 2
            continue
        var, sep, value = a.partition("=")
        if not sep or not var:
            sys.exit(f"redis_load.py: not VAR=VALUE: {a}")
        server_env[var] = value
        i += 1
    base_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if "LD_PRELOAD" not in server_env and libc_path():
        server_env["LD_PRELOAD"] = libc_path()
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--daemonize", "no", "--logfile", "", "--loglevel", "warning"],
        env=base_env | server_env, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while call(port, "PING", 0.2) != "+PONG":
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("redis_load.py: redis-server did not start")
            time.sleep(0.01)
        total_req, total_s, figures = 0, 0.0, {}
        for size in SIZES:
            r = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-q",
                                "-n", str(requests), "-r", str(keys), "-d", str(size),
                                "-t", TESTS],
                               env=base_env, capture_output=True, text=True, timeout=300)
            rps = parse_rps(r.stdout)
            missing = [t for t in TESTS.upper().split(",") if t not in rps]
            if r.returncode != 0 or missing:
                sys.exit(f"redis_load.py: redis-benchmark -d {size}: exit {r.returncode}, "
                         f"no figure for {','.join(missing) or '-'}: {r.stderr.strip()[:200]}")
            for t, v in rps.items():
                figures[f"{t.lower()}_{size}"] = v
                total_req += requests
                total_s += requests / v
        if server.poll() is not None:
            sys.exit("redis_load.py: redis-server died")
        peak = vm_hwm_kb(server.pid)
        call(port, "SHUTDOWN NOSAVE")
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    line = (f"RESULT workload=redis ops={total_req} seconds={total_s:.6f} "
            f"ops_per_sec={total_req / total_s:.1f} peak_rss_kb={peak or 0} "
            + " ".join(f"rps_{k}={v:.1f}" for k, v in sorted(figures.items())))
    dest = os.environ.get("BENCH_RESULT_FILE")
    if dest:
        with open(dest, "a") as f:
            f.write(line + "\n")
    else:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
