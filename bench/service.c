/* service: a long-running server's allocations: short-lived blocks of
 * mixed sizes for each request over a slowly growing set of long-lived
 * ones (sessions, cache entries), with the resident set sampled as it runs.
 *
 *   service THREADS REQUESTS KEEP_EVERY SEED
 *
 * Each of THREADS workers serves REQUESTS requests. A request allocates
 * 8-64 blocks (mostly 16-512 B, one in eight 1-16 KiB, one in a hundred
 * 64-256 KiB), writes them, and frees them all at its end, in random order.
 * Every KEEP_EVERY requests a worker keeps a long-lived block of 32 B-4 KiB,
 * and one time in four it drops one of its older ones instead, so the
 * long-lived set grows slowly. The main thread samples the resident set
 * every 10 ms. RESULT gives the peak, the resident set at the end (all
 * requests served, the long-lived set still held: what a service that has
 * been running for a while costs its machine) and the mean of the samples.
 * One op = one request. */
#include "bench_common.h"

static const char usage[] =
    "usage: service THREADS REQUESTS KEEP_EVERY SEED\n"
    "  e.g. service 2 200000 16 42\n";

#define MAX_PER_REQUEST 64

struct worker {
    uint64_t requests;
    uint32_t keep_every;
    uint64_t seed;
    unsigned char **kept;
    size_t nkept, cap;
    uint64_t errors;
};

static atomic_uint started, finished;
static atomic_uint go;
static _Atomic double t_end;

static size_t request_size(bench_rng *r)
{
    uint32_t x = bench_rng_below(r, 800);
    if (x < 8)
        return bench_rng_range(r, 64 << 10, 256 << 10);
    if (x < 108)
        return bench_rng_range(r, 1 << 10, 16 << 10);
    return bench_rng_range(r, 16, 512);
}

static void keep_one(struct worker *w, bench_rng *r)
{
    if (w->nkept > 4 && bench_rng_below(r, 4) == 0) {
        size_t i = bench_rng_below(r, (uint32_t)w->nkept);
        free(w->kept[i]);
        w->kept[i] = w->kept[--w->nkept];
        return;
    }
    if (w->nkept == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 1024;
        unsigned char **k = realloc(w->kept, cap * sizeof *k);
        if (!k)
            bench_oom(cap * sizeof *k);
        w->kept = k;
        w->cap = cap;
    }
    size_t size = bench_rng_range(r, 32, 4096);
    unsigned char *p = malloc(size);
    if (!p)
        bench_oom(size);
    memset(p, 0x4b, size < 128 ? size : 128);
    w->kept[w->nkept++] = p;
}

static void *bench_timed_service_worker(void *arg)
{
    struct worker *w = arg;
    bench_rng rng;
    bench_rng_seed(&rng, w->seed);
    unsigned char *blk[MAX_PER_REQUEST];
    unsigned spins = 0;

    atomic_fetch_add(&started, 1);
    while (!atomic_load_explicit(&go, memory_order_acquire))
        bench_backoff(&spins);
    for (uint64_t q = 0; q < w->requests; q++) {
        unsigned n = (unsigned)bench_rng_range(&rng, 8, MAX_PER_REQUEST);
        for (unsigned i = 0; i < n; i++) {
            size_t size = request_size(&rng);
            unsigned char *p = malloc(size);
            if (!p)
                bench_oom(size);
            memset(p, (int)(i + 1), size < 256 ? size : 256);
            p[size - 1] = (unsigned char)(i + 1);
            blk[i] = p;
        }
        /* the request's blocks die in random order */
        for (unsigned i = n; i > 0; i--) {
            unsigned j = bench_rng_below(&rng, i);
            unsigned char *p = blk[j];
            blk[j] = blk[i - 1];
            if (p[0] == 0)
                w->errors++;
            free(p);
        }
        if (q % w->keep_every == 0)
            keep_one(w, &rng);
    }
    bench_record_max(&t_end, bench_now());
    atomic_fetch_add_explicit(&finished, 1, memory_order_release);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 5)
        bench_die("%s", usage);
    unsigned threads = (unsigned)bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t requests = bench_arg_u64(argc, argv, 2, 0, usage);
    uint32_t keep_every = (uint32_t)bench_arg_u64(argc, argv, 3, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 4, 0, usage);
    if (threads < 1 || threads > 1024 || keep_every < 1)
        bench_die("need 1 <= THREADS <= 1024 and KEEP_EVERY >= 1\n%s", usage);

    struct worker *w = calloc(threads, sizeof *w);
    if (!w)
        bench_oom(threads * sizeof *w);
    for (unsigned i = 0; i < threads; i++) {
        w[i].requests = requests;
        w[i].keep_every = keep_every;
        w[i].seed = seed + i;
        bench_thread_start(bench_timed_service_worker, &w[i]);
    }
    bench_poll_until(&started, threads);
    double t0 = bench_now();
    atomic_store_explicit(&go, 1, memory_order_release);
    double sum = 0;
    uint64_t samples = 0;
    while (atomic_load_explicit(&finished, memory_order_acquire) < threads) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        sum += (double)bench_current_rss_kb();
        samples++;
    }
    long end_rss = bench_current_rss_kb();
    uint64_t errors = 0;
    size_t kept = 0;
    for (unsigned i = 0; i < threads; i++) {
        errors += w[i].errors;
        kept += w[i].nkept;
    }
    bench_report("service", requests * threads, atomic_load(&t_end) - t0,
                 " end_rss_kb=%ld mean_rss_kb=%.0f kept=%zu", end_rss,
                 samples ? sum / (double)samples : (double)end_rss, kept);
    for (unsigned i = 0; i < threads; i++) {
        for (size_t k = 0; k < w[i].nkept; k++)
            free(w[i].kept[k]);
        free(w[i].kept);
    }
    free(w);
    if (errors) {
        fprintf(stderr, "service: %llu blocks changed under the program\n",
                (unsigned long long)errors);
        return 1;
    }
    return 0;
}
