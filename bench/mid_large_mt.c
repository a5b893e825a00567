/* mid_large_mt: per-thread random slot replacement with mid/large blocks.
 *
 *   mid_large_mt THREADS CYCLES WS SEED
 *
 * Each thread owns WS slots of blocks with random sizes 8..32 KiB, fills them
 * (not timed), then does CYCLES random replacements (free + malloc, first and
 * last byte written). Threads share nothing. One op = one malloc+free pair;
 * ops = THREADS * CYCLES. */
#include "bench_common.h"

static const char usage[] =
    "usage: mid_large_mt THREADS CYCLES WS SEED\n"
    "  THREADS  worker threads (e.g. 2)\n"
    "  CYCLES   timed malloc+free pairs per thread\n"
    "  WS       working-set slots per thread (e.g. 256)\n"
    "  SEED     PRNG seed\n";

#define MIN_SIZE (8u * 1024)
#define MAX_SIZE (32u * 1024)

struct worker {
    uint64_t seed;
    uint64_t cycles;
    uint32_t ws;
};

static bench_barrier start_line;
static double t_start;
static _Atomic double t_end;
static atomic_uint finished;

static BENCH_NOINLINE void bench_timed_mid_large(char **slots, uint32_t ws, uint64_t cycles,
                                                 bench_rng *rng)
{
    for (uint64_t i = 0; i < cycles; i++) {
        uint64_t x = bench_rng_next(rng);
        uint32_t idx = (uint32_t)(((x & 0xffffffffu) * ws) >> 32);
        size_t size = MIN_SIZE + (size_t)(((x >> 32) * (uint64_t)(MAX_SIZE - MIN_SIZE + 1)) >> 32);
        free(slots[idx]);
        char *p = malloc(size);
        if (!p)
            bench_oom(size);
        p[0] = (char)i;
        p[size - 1] = (char)i;
        slots[idx] = p;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    bench_rng rng;
    bench_rng_seed(&rng, w->seed);
    char **slots = malloc(w->ws * sizeof *slots);
    if (!slots)
        bench_oom(w->ws * sizeof *slots);
    for (uint32_t i = 0; i < w->ws; i++) {
        size_t size = bench_rng_range(&rng, MIN_SIZE, MAX_SIZE);
        slots[i] = malloc(size);
        if (!slots[i])
            bench_oom(size);
        slots[i][0] = 1;
    }
    if (bench_barrier_wait(&start_line))
        t_start = bench_now();
    bench_timed_mid_large(slots, w->ws, w->cycles, &rng);
    bench_record_max(&t_end, bench_now());
    for (uint32_t i = 0; i < w->ws; i++)
        free(slots[i]);
    free(slots);
    atomic_fetch_add_explicit(&finished, 1, memory_order_release);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 5)
        bench_die("%s", usage);
    uint64_t threads = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t cycles = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t ws = bench_arg_u64(argc, argv, 3, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 4, 0, usage);
    if (threads == 0 || threads > 1024 || ws == 0 || ws > (1u << 24))
        bench_die("THREADS must be 1..1024 and WS 1..2^24\n%s", usage);

    struct worker *w = calloc(threads, sizeof *w);
    if (!w)
        bench_oom(threads * sizeof *w);
    bench_barrier_init(&start_line, (unsigned)threads);
    for (uint64_t t = 0; t < threads; t++) {
        w[t].seed = seed * 1000003u + t;
        w[t].cycles = cycles;
        w[t].ws = (uint32_t)ws;
        bench_thread_start(worker_main, &w[t]);
    }
    bench_poll_until(&finished, (unsigned)threads);
    free(w);
    bench_report("mid_large_mt", threads * cycles, atomic_load(&t_end) - t_start, " threads=%llu ws=%llu size=8192-32768",
                 (unsigned long long)threads, (unsigned long long)ws);
    return 0;
}
