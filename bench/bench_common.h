/* Shared helpers for the hakmem benchmark workloads.
 *
 * Every workload calls only the plain malloc API, so the allocator under test
 * is chosen by LD_PRELOAD or by linking. Each prints exactly one line:
 *
 *   RESULT workload=NAME ops=N seconds=S ops_per_sec=X peak_rss_kb=K [key=value ...]
 *
 * "ops" counts allocator operations as defined by each workload (usually one
 * malloc+free pair). "seconds" covers only the timed section. When the
 * environment variable BENCH_RESULT_FILE is set, the same line is appended to
 * that file too (bench/run uses it to collect every hyperfine run).
 *
 * Everything here is static inline: no allocation happens in these helpers. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define BENCH_NOINLINE __attribute__((noinline))

/* Timed sections live in noinline functions named bench_timed_*: bench/run
 * --profile has callgrind count instructions only inside them
 * (--toggle-collect), leaving out spin-waits named bench_wait_*. */

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- PRNG: xorshift64*, a few instructions per number ------------------ */
typedef struct { uint64_t s; } bench_rng;

static inline void bench_rng_seed(bench_rng *r, uint64_t seed)
{
    /* one splitmix64 step so that small or similar seeds diverge at once */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    r->s = z ? z : 0x2545F4914F6CDD1Dull;
}

static inline uint64_t bench_rng_next(bench_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n) from the high 32 bits, without a division. */
static inline uint32_t bench_rng_below(bench_rng *r, uint32_t n)
{
    return (uint32_t)(((bench_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Uniform in [lo, hi]. */
static inline size_t bench_rng_range(bench_rng *r, size_t lo, size_t hi)
{
    return lo + bench_rng_below(r, (uint32_t)(hi - lo + 1));
}

/* ---- memory figures ------------------------------------------------------ */
/* Peak resident set of this program: VmHWM from /proc/self/status, which
 * starts afresh at exec. getrusage's ru_maxrss does not: Linux carries it
 * across execve, so a program started by a large parent (a Python runner)
 * reported the parent's RSS as its own peak. ru_maxrss only as a fallback. */
static inline long bench_peak_rss_kb(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0) {
            buf[n] = '\0';
            const char *hwm = strstr(buf, "VmHWM:");
            if (hwm)
                return strtol(hwm + 6, NULL, 10);
        }
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return ru.ru_maxrss; /* KiB on Linux */
}

/* Current resident set from /proc/self/statm (second field, in pages). */
static inline long bench_current_rss_kb(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = buf;
    strtoul(p, &p, 10);              /* size */
    unsigned long resident = strtoul(p, NULL, 10);
    return (long)(resident * (unsigned long)sysconf(_SC_PAGESIZE) / 1024);
}

/* ---- writing a block ------------------------------------------------------ */
/* Writes v to a byte in every page of p[0..size): its first byte, the first
 * byte of each page after it, its last byte. A program writes what it asks
 * for, and an allocator's pages inside a block that nobody writes cost
 * nothing; one write a page costs a fraction of a memset of the block. */
static inline void bench_touch(char *p, size_t size, char v)
{
    char *last = p + size - 1;
    for (char *q = p; q < last; q = (char *)(((uintptr_t)q | 4095) + 1))
        *q = v;
    *last = v;
}

/* ---- arguments and errors ------------------------------------------------- */
static inline void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    exit(2);
}

static inline void bench_oom(size_t size)
{
    fprintf(stderr, "out of memory (size %zu)\n", size);
    exit(3);
}

/* argv[i] as an unsigned integer, or def when absent; exits on garbage. */
static inline uint64_t bench_arg_u64(int argc, char **argv, int i, uint64_t def,
                                     const char *usage)
{
    if (i >= argc)
        return def;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(argv[i], &end, 0);
    if (errno || end == argv[i] || *end != '\0')
        bench_die("bad argument '%s'\n%s", argv[i], usage);
    return v;
}

static inline double bench_arg_double(int argc, char **argv, int i, double def,
                                      const char *usage)
{
    if (i >= argc)
        return def;
    char *end;
    errno = 0;
    double v = strtod(argv[i], &end);
    if (errno || end == argv[i] || *end != '\0')
        bench_die("bad argument '%s'\n%s", argv[i], usage);
    return v;
}

static inline void bench_check_help(int argc, char **argv, const char *usage)
{
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(usage, stdout);
        exit(0);
    }
}

/* ---- the RESULT line ------------------------------------------------------ */
/* extra_fmt: further " key=value" pairs (printf format), or "" */
__attribute__((format(printf, 4, 5)))
static inline void bench_report(const char *workload, uint64_t ops, double seconds,
                                const char *extra_fmt, ...)
{
    char line[512];
    double rate = seconds > 0 ? (double)ops / seconds : 0.0;
    int n = snprintf(line, sizeof line,
                     "RESULT workload=%s ops=%llu seconds=%.6f ops_per_sec=%.1f peak_rss_kb=%ld",
                     workload, (unsigned long long)ops, seconds, rate, bench_peak_rss_kb());
    if (n < 0 || (size_t)n >= sizeof line - 2)
        n = (int)strlen(line);
    va_list ap;
    va_start(ap, extra_fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, extra_fmt, ap);
    va_end(ap);
    if (m > 0)
        n += m < (int)(sizeof line - (size_t)n - 2) ? m : (int)(sizeof line - (size_t)n - 2);
    line[n++] = '\n';

    fflush(stdout);
    if (write(STDOUT_FILENO, line, (size_t)n) < 0) { /* nothing to do */ }
    const char *path = getenv("BENCH_RESULT_FILE");
    if (path && *path) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (write(fd, line, (size_t)n) < 0) { /* ignore */ }
            close(fd);
        }
    }
}

/* Busy-wait hint for spin loops. */
static inline void bench_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- thread coordination without futexes --------------------------------
 * The workloads' own synchronisation never sleeps on a futex (no pthread
 * barrier, mutex or join), so that `strace -f -c` futex counts are the
 * allocator's: threads are detached, spin briefly then sched_yield, and the
 * main thread polls with nanosleep. */
static inline void bench_backoff(unsigned *spins)
{
    if (++*spins < 128)
        bench_cpu_relax();
    else
        sched_yield();
}

typedef struct {
    atomic_uint arrived;
    atomic_uint generation;
    unsigned n;
} bench_barrier;

static inline void bench_barrier_init(bench_barrier *b, unsigned n)
{
    atomic_init(&b->arrived, 0);
    atomic_init(&b->generation, 0);
    b->n = n;
}

/* Returns 1 in exactly one of the n threads (the last to arrive), else 0. */
static inline int bench_barrier_wait(bench_barrier *b)
{
    unsigned gen = atomic_load_explicit(&b->generation, memory_order_acquire);
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) + 1 == b->n) {
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&b->generation, 1, memory_order_release);
        return 1;
    }
    unsigned spins = 0;
    while (atomic_load_explicit(&b->generation, memory_order_acquire) == gen)
        bench_backoff(&spins);
    return 0;
}

/* Runs fn(arg) on a new detached thread; exits the program if that fails. */
static inline void bench_thread_start(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_t tid;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&tid, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        fprintf(stderr, "pthread_create failed: %s\n", strerror(err));
        exit(2);
    }
}

/* Main thread: sleeps in steps of 100 us until *count reaches n. */
static inline void bench_poll_until(atomic_uint *count, unsigned n)
{
    while (atomic_load_explicit(count, memory_order_acquire) < n) {
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
}

/* Atomically raises *max_time to t (timestamps of the last finisher). */
static inline void bench_record_max(_Atomic double *max_time, double t)
{
    double cur = atomic_load_explicit(max_time, memory_order_relaxed);
    while (cur < t && !atomic_compare_exchange_weak_explicit(max_time, &cur, t,
                                                             memory_order_acq_rel,
                                                             memory_order_relaxed)) {
    }
}

#endif /* BENCH_COMMON_H */
