/* larson: the classic server simulation (after Larson and Krishnan).
 *
 *   larson SECONDS MIN_SIZE MAX_SIZE CHUNKS ROUNDS SEED THREADS
 *
 * The main thread allocates THREADS arrays of CHUNKS blocks. Each array is
 * worked by a chain of threads: a thread replaces random blocks of its array
 * (free + malloc of MIN_SIZE..MAX_SIZE bytes) ROUNDS*CHUNKS times, then starts
 * a successor thread that inherits the array and exits. So most blocks are
 * freed by a thread other than the one that allocated them, and threads come
 * and go. After SECONDS the chains stop at the next hand-off (a thread also
 * checks the stop flag every 4096 replacements, so the run stays
 * time-bounded). One op = one malloc+free pair. */
#include "bench_common.h"

static const char usage[] =
    "usage: larson SECONDS MIN_SIZE MAX_SIZE CHUNKS ROUNDS SEED THREADS\n"
    "  e.g. larson 2 8 1000 5000 100 4141 2\n";

struct chain {
    char **blocks;
    uint32_t nblocks;
    size_t min_size, max_size;
    uint64_t lifetime_ops;
    bench_rng rng;
    uint64_t ops;           /* written by one thread at a time along the chain */
    uint64_t generations;
    atomic_int done;
    char pad[64]; /* keeps neighbouring chains off each other's cache lines */
};

static atomic_int stop_flag;
static pthread_attr_t detached;

static void *bench_timed_larson_thread(void *arg);

static void finish_or_hand_off(struct chain *c)
{
    if (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        pthread_t t;
        c->generations++;
        if (pthread_create(&t, &detached, bench_timed_larson_thread, c) == 0)
            return;
        c->generations--;
    }
    atomic_store_explicit(&c->done, 1, memory_order_release);
}

static void *bench_timed_larson_thread(void *arg)
{
    struct chain *c = arg;
    char **blocks = c->blocks;
    uint32_t n = c->nblocks;
    uint64_t i;
    for (i = 0; i < c->lifetime_ops; i++) {
        if ((i & 4095) == 4095 && atomic_load_explicit(&stop_flag, memory_order_relaxed))
            break;
        uint32_t victim = bench_rng_below(&c->rng, n);
        size_t size = bench_rng_range(&c->rng, c->min_size, c->max_size);
        free(blocks[victim]);
        char *p = malloc(size);
        if (!p)
            bench_oom(size);
        p[0] = (char)i;
        blocks[victim] = p;
    }
    c->ops += i;
    finish_or_hand_off(c);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 8)
        bench_die("%s", usage);
    double seconds = bench_arg_double(argc, argv, 1, 0, usage);
    size_t min_size = (size_t)bench_arg_u64(argc, argv, 2, 0, usage);
    size_t max_size = (size_t)bench_arg_u64(argc, argv, 3, 0, usage);
    uint64_t chunks = bench_arg_u64(argc, argv, 4, 0, usage);
    uint64_t rounds = bench_arg_u64(argc, argv, 5, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 6, 0, usage);
    uint64_t threads = bench_arg_u64(argc, argv, 7, 0, usage);
    if (min_size == 0 || max_size < min_size || max_size > (1u << 30) || chunks == 0 ||
        chunks > (1u << 24) || rounds == 0 || threads == 0 || threads > 1024 || seconds <= 0)
        bench_die("bad arguments\n%s", usage);

    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);

    struct chain *chains = calloc(threads, sizeof *chains);
    if (!chains)
        bench_oom(threads * sizeof *chains);
    bench_rng rng;
    bench_rng_seed(&rng, seed);
    for (uint64_t t = 0; t < threads; t++) {
        struct chain *c = &chains[t];
        c->blocks = malloc(chunks * sizeof *c->blocks);
        if (!c->blocks)
            bench_oom(chunks * sizeof *c->blocks);
        c->nblocks = (uint32_t)chunks;
        c->min_size = min_size;
        c->max_size = max_size;
        c->lifetime_ops = rounds * chunks;
        bench_rng_seed(&c->rng, seed * 7919u + t);
        for (uint64_t i = 0; i < chunks; i++) {
            size_t size = bench_rng_range(&rng, min_size, max_size);
            c->blocks[i] = malloc(size);
            if (!c->blocks[i])
                bench_oom(size);
            c->blocks[i][0] = 1;
        }
    }

    double t0 = bench_now();
    for (uint64_t t = 0; t < threads; t++) {
        pthread_t tid;
        chains[t].generations = 1;
        if (pthread_create(&tid, &detached, bench_timed_larson_thread, &chains[t]) != 0)
            bench_die("pthread_create failed\n");
    }
    struct timespec nap = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
    while (nanosleep(&nap, &nap) != 0 && errno == EINTR) { }
    atomic_store(&stop_flag, 1);
    for (uint64_t t = 0; t < threads; t++) {
        while (!atomic_load_explicit(&chains[t].done, memory_order_acquire)) {
            struct timespec ms = { 0, 200000 };
            nanosleep(&ms, NULL);
        }
    }
    double t1 = bench_now();

    uint64_t ops = 0, generations = 0;
    for (uint64_t t = 0; t < threads; t++) {
        ops += chains[t].ops;
        generations += chains[t].generations;
        for (uint64_t i = 0; i < chunks; i++)
            free(chains[t].blocks[i]);
        free(chains[t].blocks);
    }
    free(chains);
    bench_report("larson", ops, t1 - t0, " threads=%llu thread_lifetimes=%llu size=%zu-%zu",
                 (unsigned long long)threads, (unsigned long long)generations, min_size, max_size);
    return 0;
}
