/* oversub: more threads than cores, all allocating, freeing each other's
 * blocks and ending while their blocks live on.
 *
 *   oversub THREADS OPS LIFE SEED
 *
 * THREADS chains of threads run at once; OPS ops in total are spread over
 * them, so the work is the same whatever THREADS is and the rates of two
 * counts compare. A thread does LIFE ops, then starts its successor in the
 * chain and exits; the successor takes over the working set it left and
 * frees those blocks (of a thread that has ended) as it replaces them. An op replaces a random block of a 64-block
 * working set: 15/16 of sizes 16..512 B, 1/16 of 1..32 KiB, 1/1024 of
 * 256 KiB..1 MiB, each written in every page it spans (bench_touch). Every
 * fourth new block is swapped into a shared array
 * of 4 slots per thread instead, and the block that comes out, most likely
 * another thread's, is freed. One op = one malloc+free pair. With THREADS
 * well above the cores, allocator locks are often held by a thread the
 * scheduler has taken off the CPU: what their waiting costs shows here. */
#include "bench_common.h"

static const char usage[] =
    "usage: oversub THREADS OPS LIFE SEED\n"
    "  e.g. oversub 64 4000000 20000 42\n";

#define WS 64u

struct chain {
    uint64_t remaining; /* ops still to do in this chain */
    uint64_t life;
    uint64_t seed;
    unsigned serial;    /* threads of this chain started so far */
    char *ws[WS];       /* the working set, handed from thread to successor */
};

static _Atomic(char *) *shared;
static size_t nshared;
static _Atomic double t_end;
static atomic_uint chains_done;

static inline size_t pick_size(bench_rng *rng)
{
    uint32_t r = bench_rng_below(rng, 1024);
    if (r == 0)
        return bench_rng_range(rng, 256 * 1024, 1024 * 1024);
    if (r < 64)
        return bench_rng_range(rng, 1024, 32 * 1024);
    return bench_rng_range(rng, 16, 512);
}

static BENCH_NOINLINE void *bench_timed_oversub_thread(void *arg)
{
    struct chain *c = arg;
    bench_rng rng;
    bench_rng_seed(&rng, c->seed + c->serial++);
    uint64_t n = c->remaining < c->life ? c->remaining : c->life;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t idx = bench_rng_below(&rng, WS);
        size_t size = pick_size(&rng);
        free(c->ws[idx]);
        char *p = malloc(size);
        if (!p)
            bench_oom(size);
        bench_touch(p, size, (char)i);
        if ((i & 3) == 0) {
            size_t s = bench_rng_below(&rng, (uint32_t)nshared);
            p = atomic_exchange_explicit(&shared[s], p, memory_order_acq_rel);
        }
        c->ws[idx] = p;
    }
    c->remaining -= n;
    if (c->remaining > 0) {
        bench_thread_start(bench_timed_oversub_thread, c);
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
    uint64_t ops = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t life = bench_arg_u64(argc, argv, 3, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 4, 0, usage);
    if (threads == 0 || threads > 4096 || ops < threads || life == 0)
        bench_die("bad arguments\n%s", usage);

    nshared = 4 * threads;
    shared = calloc(nshared, sizeof *shared);
    struct chain *chains = calloc(threads, sizeof *chains);
    if (!shared || !chains)
        bench_oom(threads * sizeof *chains);
    double t0 = bench_now();
    for (uint64_t i = 0; i < threads; i++) {
        chains[i].remaining = ops / threads + (i < ops % threads);
        chains[i].life = life;
        chains[i].seed = seed * 1000003u + i * 0x9E3779B9u;
        bench_thread_start(bench_timed_oversub_thread, &chains[i]);
    }
    bench_poll_until(&chains_done, (unsigned)threads);
    double t1 = atomic_load(&t_end);
    for (uint64_t i = 0; i < threads; i++)
        for (unsigned k = 0; k < WS; k++)
            free(chains[i].ws[k]);
    for (size_t s = 0; s < nshared; s++)
        free(atomic_load(&shared[s]));
    free(chains);
    free(shared);
    bench_report("oversub", ops, t1 - t0, " threads=%llu life=%llu cores=%ld",
                 (unsigned long long)threads, (unsigned long long)life, sysconf(_SC_NPROCESSORS_ONLN));
    return 0;
}
