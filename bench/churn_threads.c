/* churn_threads: many short-lived threads.
 *
 *   churn_threads THREADS CONCURRENCY ALLOCS SEED
 *
 * CONCURRENCY chains of threads run at once, THREADS threads in total. Each
 * thread frees the few blocks its predecessor in the chain left behind
 * (blocks of a thread that has exited), does ALLOCS random replacements in a
 * 64-slot working set (7/8 of sizes 16..512 B, 1/8 of 1..32 KiB, each block
 * written in every page it spans: bench_touch), frees its
 * working set except 4 survivors, starts its successor and exits.
 * One op = one malloc+free pair; ops = THREADS * ALLOCS. Also reports the RSS
 * after all threads have ended (final_rss_kb). */
#include "bench_common.h"

static const char usage[] =
    "usage: churn_threads THREADS CONCURRENCY ALLOCS SEED\n"
    "  e.g. churn_threads 4000 2 2000 42\n";

#define WS 64u
#define SURVIVORS 4u

struct chain {
    uint64_t remaining; /* threads still to run in this chain, this one included */
    uint64_t seed;
    uint64_t allocs;
    char *survivors[SURVIVORS];
};

static _Atomic double t_end;
static atomic_uint chains_done;

static inline size_t pick_size(bench_rng *rng)
{
    if (bench_rng_below(rng, 8) == 0)
        return bench_rng_range(rng, 1024, 32 * 1024);
    return bench_rng_range(rng, 16, 512);
}

static BENCH_NOINLINE void *bench_timed_churn_thread(void *arg)
{
    struct chain *c = arg;
    bench_rng rng;
    bench_rng_seed(&rng, c->seed + c->remaining);
    for (unsigned i = 0; i < SURVIVORS; i++) {
        free(c->survivors[i]);
        c->survivors[i] = NULL;
    }
    char *ws[WS] = { 0 };
    for (uint64_t i = 0; i < c->allocs; i++) {
        uint32_t idx = bench_rng_below(&rng, WS);
        size_t size = pick_size(&rng);
        free(ws[idx]);
        char *p = malloc(size);
        if (!p)
            bench_oom(size);
        bench_touch(p, size, (char)i);
        ws[idx] = p;
    }
    for (unsigned i = 0; i < WS; i++) {
        if (i < SURVIVORS)
            c->survivors[i] = ws[i];
        else
            free(ws[i]);
    }
    if (--c->remaining > 0) {
        bench_thread_start(bench_timed_churn_thread, c);
    } else {
        bench_record_max(&t_end, bench_now());
        atomic_fetch_add_explicit(&chains_done, 1, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 5)
        bench_die("%s", usage);
    uint64_t threads = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t conc = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t allocs = bench_arg_u64(argc, argv, 3, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 4, 0, usage);
    if (threads == 0 || conc == 0 || conc > 1024)
        bench_die("bad arguments\n%s", usage);
    if (conc > threads)
        conc = threads;

    struct chain *chains = calloc(conc, sizeof *chains);
    if (!chains)
        bench_oom(conc * sizeof *chains);
    double t0 = bench_now();
    for (uint64_t i = 0; i < conc; i++) {
        /* spread THREADS over the chains */
        chains[i].remaining = threads / conc + (i < threads % conc);
        chains[i].seed = seed * 1000003u + i * 0x9E3779B9u;
        chains[i].allocs = allocs;
        bench_thread_start(bench_timed_churn_thread, &chains[i]);
    }
    bench_poll_until(&chains_done, (unsigned)conc);
    double t1 = atomic_load(&t_end);
    for (uint64_t i = 0; i < conc; i++)
        for (unsigned k = 0; k < SURVIVORS; k++)
            free(chains[i].survivors[k]);
    free(chains);
    bench_report("churn_threads", threads * allocs, t1 - t0,
                 " threads=%llu concurrency=%llu final_rss_kb=%ld", (unsigned long long)threads,
                 (unsigned long long)conc, bench_current_rss_kb());
    return 0;
}
