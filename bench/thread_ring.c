/* thread_ring: threads in a ring, each passing the blocks it allocates to
 * the next, which frees them (pipelines, actor systems, work stealing:
 * every free is of a block another thread allocated).
 *
 *   thread_ring THREADS BLOCKS MIN MAX SEED
 *
 * THREADS threads (more than the machine's cores is the point: 8 and 32 on
 * two cores), each allocating BLOCKS blocks of MIN..MAX bytes (uniform),
 * writing their first bytes and sending them, in batches of 32, through a
 * bounded single-producer single-consumer queue to the next thread, which
 * checks and frees what it receives. A full or empty queue makes a thread
 * spin briefly, then yield. One op = one malloc plus its remote free. */
#include "bench_common.h"

static const char usage[] =
    "usage: thread_ring THREADS BLOCKS MIN MAX SEED\n"
    "  e.g. thread_ring 8 400000 16 512 42\n";

#define BATCH 32u
#define QCAP 1024u   /* pointers per queue, a power of two */

struct queue {
    _Alignas(64) atomic_uint head;   /* written by the consumer */
    _Alignas(64) atomic_uint tail;   /* written by the producer */
    _Alignas(64) unsigned char *slot[QCAP];
};

struct worker {
    struct queue *out, *in;
    uint64_t blocks;
    size_t lo, hi;
    uint64_t seed;
    uint64_t errors;
};

static atomic_uint started, finished;
static atomic_uint go;
static _Atomic double t_end;

static void send(struct queue *q, unsigned char **batch, unsigned n)
{
    unsigned tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    unsigned spins = 0;
    while (tail - atomic_load_explicit(&q->head, memory_order_acquire) > QCAP - n)
        bench_backoff(&spins);
    for (unsigned i = 0; i < n; i++)
        q->slot[(tail + i) & (QCAP - 1)] = batch[i];
    atomic_store_explicit(&q->tail, tail + n, memory_order_release);
}

/* Frees what is waiting; returns how many. */
static unsigned drain(struct queue *q, uint64_t *errors)
{
    unsigned head = atomic_load_explicit(&q->head, memory_order_relaxed);
    unsigned tail = atomic_load_explicit(&q->tail, memory_order_acquire);
    for (unsigned i = head; i != tail; i++) {
        unsigned char *p = q->slot[i & (QCAP - 1)];
        if (p[0] != (unsigned char)(p[1] ^ 0x5a))
            (*errors)++;
        free(p);
    }
    atomic_store_explicit(&q->head, tail, memory_order_release);
    return tail - head;
}

static void *bench_timed_ring_worker(void *arg)
{
    struct worker *w = arg;
    bench_rng rng;
    bench_rng_seed(&rng, w->seed);
    unsigned char *batch[BATCH];
    uint64_t sent = 0, got = 0;
    unsigned spins = 0;

    atomic_fetch_add(&started, 1);
    while (!atomic_load_explicit(&go, memory_order_acquire))
        bench_backoff(&spins);
    while (sent < w->blocks || got < w->blocks) {
        if (sent < w->blocks) {
            unsigned n = w->blocks - sent < BATCH ? (unsigned)(w->blocks - sent) : BATCH;
            for (unsigned i = 0; i < n; i++) {
                size_t size = bench_rng_range(&rng, w->lo, w->hi);
                unsigned char *p = malloc(size);
                if (!p)
                    bench_oom(size);
                p[1] = (unsigned char)(sent + i);
                p[0] = (unsigned char)(p[1] ^ 0x5a);
                batch[i] = p;
            }
            send(w->out, batch, n);
            sent += n;
        }
        unsigned k = drain(w->in, &w->errors);
        got += k;
        if (!k && sent >= w->blocks)
            bench_backoff(&spins);
    }
    bench_record_max(&t_end, bench_now());
    atomic_fetch_add_explicit(&finished, 1, memory_order_release);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 6)
        bench_die("%s", usage);
    unsigned threads = (unsigned)bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t blocks = bench_arg_u64(argc, argv, 2, 0, usage);
    size_t lo = bench_arg_u64(argc, argv, 3, 0, usage);
    size_t hi = bench_arg_u64(argc, argv, 4, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 5, 0, usage);
    if (threads < 2 || threads > 1024 || lo < 2 || hi < lo || hi > (1u << 30))
        bench_die("need 2 <= THREADS <= 1024 and 2 <= MIN <= MAX\n%s", usage);

    /* the queues and workers are the program's own structures: allocated
     * before the timed part, like every workload's set-up */
    struct queue *q = aligned_alloc(64, threads * sizeof *q);
    struct worker *w = calloc(threads, sizeof *w);
    if (!q || !w)
        bench_oom(threads * sizeof *q);
    for (unsigned i = 0; i < threads; i++) {
        atomic_init(&q[i].head, 0);
        atomic_init(&q[i].tail, 0);
    }
    for (unsigned i = 0; i < threads; i++) {
        w[i].out = &q[(i + 1) % threads];
        w[i].in = &q[i];
        w[i].blocks = blocks;
        w[i].lo = lo;
        w[i].hi = hi;
        w[i].seed = seed + i;
        bench_thread_start(bench_timed_ring_worker, &w[i]);
    }
    bench_poll_until(&started, threads);
    double t0 = bench_now();
    atomic_store_explicit(&go, 1, memory_order_release);
    bench_poll_until(&finished, threads);

    uint64_t errors = 0;
    for (unsigned i = 0; i < threads; i++)
        errors += w[i].errors;
    bench_report("thread_ring", blocks * threads, atomic_load(&t_end) - t0, " threads=%u", threads);
    free(w);
    free(q);
    if (errors) {
        fprintf(stderr, "thread_ring: %llu blocks changed in flight\n", (unsigned long long)errors);
        return 1;
    }
    return 0;
}
