/* false_sharing: objects allocated by one thread and written by others
 * (a dispatcher handing out requests; per-thread counters and buffers).
 *
 *   false_sharing THREADS ROUNDS WRITES SIZE
 *
 * The main thread allocates THREADS objects of SIZE bytes in a row, as a
 * dispatcher would, and hands object i to thread i. Each thread then, ROUNDS
 * times: writes its object WRITES times, frees it, and allocates a new
 * object of the same size for itself. The first writes share cache lines
 * whatever the allocator does (the program made neighbours of them); after
 * that, an allocator that hands a thread back the block another thread's
 * object sits beside, or gives two threads' objects one cache line, makes
 * the threads' writes pull the line back and forth between cores. One op =
 * one write; the mallocs and frees are a small part of the time. */
#include "bench_common.h"

static const char usage[] =
    "usage: false_sharing THREADS ROUNDS WRITES SIZE\n"
    "  e.g. false_sharing 2 20000 2000 16\n";

struct worker {
    volatile unsigned char *obj;
    uint64_t rounds, writes;
    size_t size;
};

static atomic_uint started, finished;
static atomic_uint go;
static _Atomic double t_end;

static void *bench_timed_writer(void *arg)
{
    struct worker *w = arg;
    unsigned spins = 0;
    atomic_fetch_add(&started, 1);
    while (!atomic_load_explicit(&go, memory_order_acquire))
        bench_backoff(&spins);
    for (uint64_t r = 0; r < w->rounds; r++) {
        volatile unsigned char *p = w->obj;
        for (uint64_t i = 0; i < w->writes; i++)
            p[i % w->size] = (unsigned char)(p[i % w->size] + 1);
        free((void *)p);
        w->obj = malloc(w->size);
        if (!w->obj)
            bench_oom(w->size);
    }
    free((void *)w->obj);
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
    uint64_t rounds = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t writes = bench_arg_u64(argc, argv, 3, 0, usage);
    size_t size = bench_arg_u64(argc, argv, 4, 0, usage);
    if (threads < 1 || threads > 1024 || size < 1 || size > 4096)
        bench_die("need 1 <= THREADS <= 1024 and 1 <= SIZE <= 4096\n%s", usage);

    struct worker *w = calloc(threads, sizeof *w);
    if (!w)
        bench_oom(threads * sizeof *w);
    for (unsigned i = 0; i < threads; i++) {
        w[i].obj = malloc(size);
        if (!w[i].obj)
            bench_oom(size);
        w[i].rounds = rounds;
        w[i].writes = writes;
        w[i].size = size;
    }
    for (unsigned i = 0; i < threads; i++)
        bench_thread_start(bench_timed_writer, &w[i]);
    bench_poll_until(&started, threads);
    double t0 = bench_now();
    atomic_store_explicit(&go, 1, memory_order_release);
    bench_poll_until(&finished, threads);
    bench_report("false_sharing", rounds * writes * threads, atomic_load(&t_end) - t0,
                 " threads=%u size=%zu", threads, size);
    free(w);
    return 0;
}
