/* producer_consumer: every free is remote.
 *
 *   producer_consumer PAIRS ITEMS SIZE_MIN SIZE_MAX
 *
 * PAIRS producer/consumer thread pairs. Each producer allocates ITEMS blocks
 * of SIZE_MIN..SIZE_MAX bytes, writes a payload pattern and passes them
 * through a lock-free single-producer/single-consumer ring to its consumer,
 * which verifies the pattern and frees the block. The ring is the
 * benchmark's own (no lock). Exits 1 if any payload was corrupted.
 * One op = one malloc (producer) + one free (consumer); ops = PAIRS * ITEMS. */
#include "bench_common.h"

static const char usage[] =
    "usage: producer_consumer PAIRS ITEMS SIZE_MIN SIZE_MAX\n"
    "  e.g. producer_consumer 1 2000000 16 1024 (SIZE_MIN >= 8)\n";

#define RING_SIZE 1024u /* power of two */
#define PATTERN_MAX 32u

struct ring {
    _Alignas(64) atomic_size_t head; /* next slot the consumer reads */
    _Alignas(64) atomic_size_t tail; /* next slot the producer writes */
    _Alignas(64) unsigned char *slot[RING_SIZE];
    uint64_t items, seed;
    size_t size_min, size_max;
    uint64_t bad;
    uint64_t fill_sum; /* blocks in the ring at each push, summed (producer only) */
};

static bench_barrier start_line;
static double t_start;
static _Atomic double t_end;
static atomic_uint finished;

static BENCH_NOINLINE void bench_wait_start(void)
{
    if (bench_barrier_wait(&start_line))
        t_start = bench_now();
}

static void *finish(void)
{
    bench_record_max(&t_end, bench_now());
    atomic_fetch_add_explicit(&finished, 1, memory_order_release);
    return NULL;
}

static inline unsigned char pattern_byte(uint32_t seq, size_t i)
{
    return (unsigned char)(seq * 31u + (uint32_t)i);
}

/* The waits are functions of their own, named bench_wait_*, so that
 * bench/run --profile can leave them out of the instruction count. */
static BENCH_NOINLINE void bench_wait_for_space(struct ring *r, size_t tail)
{
    unsigned spins = 0;
    while (tail - atomic_load_explicit(&r->head, memory_order_acquire) >= RING_SIZE)
        bench_backoff(&spins);
}

static BENCH_NOINLINE void bench_wait_for_item(struct ring *r, size_t head)
{
    unsigned spins = 0;
    while (atomic_load_explicit(&r->tail, memory_order_acquire) == head)
        bench_backoff(&spins);
}

static BENCH_NOINLINE void *bench_timed_producer(void *arg)
{
    struct ring *r = arg;
    bench_rng rng;
    bench_rng_seed(&rng, r->seed);
    bench_wait_start();
    size_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t fill_sum = 0;
    for (uint64_t n = 0; n < r->items; n++) {
        size_t size = bench_rng_range(&rng, r->size_min, r->size_max);
        unsigned char *p = malloc(size);
        if (!p)
            bench_oom(size);
        uint32_t seq = (uint32_t)n, sz = (uint32_t)size;
        memcpy(p, &seq, 4);
        memcpy(p + 4, &sz, 4);
        size_t end = size - 1 < PATTERN_MAX ? size - 1 : PATTERN_MAX;
        for (size_t i = 8; i < end; i++)
            p[i] = pattern_byte(seq, i);
        if (size > 8)
            p[size - 1] = (unsigned char)(seq ^ 0xA5u);
        size_t in_ring = tail - atomic_load_explicit(&r->head, memory_order_acquire);
        fill_sum += in_ring < RING_SIZE ? in_ring : RING_SIZE;
        if (in_ring >= RING_SIZE)
            bench_wait_for_space(r, tail);
        r->slot[tail & (RING_SIZE - 1)] = p;
        atomic_store_explicit(&r->tail, ++tail, memory_order_release);
    }
    r->fill_sum = fill_sum;
    return finish();
}

static BENCH_NOINLINE void *bench_timed_consumer(void *arg)
{
    struct ring *r = arg;
    bench_wait_start();
    size_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t bad = 0;
    for (uint64_t n = 0; n < r->items; n++) {
        if (atomic_load_explicit(&r->tail, memory_order_acquire) == head)
            bench_wait_for_item(r, head);
        unsigned char *p = r->slot[head & (RING_SIZE - 1)];
        atomic_store_explicit(&r->head, ++head, memory_order_release);
        uint32_t seq, sz;
        memcpy(&seq, p, 4);
        memcpy(&sz, p + 4, 4);
        if (seq != (uint32_t)n || sz < r->size_min || sz > r->size_max) {
            bad++;
        } else {
            size_t end = sz - 1 < PATTERN_MAX ? sz - 1 : PATTERN_MAX;
            for (size_t i = 8; i < end; i++)
                if (p[i] != pattern_byte(seq, i))
                    bad++;
            if (sz > 8 && p[sz - 1] != (unsigned char)(seq ^ 0xA5u))
                bad++;
        }
        free(p);
    }
    r->bad = bad;
    return finish();
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 5)
        bench_die("%s", usage);
    uint64_t pairs = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t items = bench_arg_u64(argc, argv, 2, 0, usage);
    size_t size_min = (size_t)bench_arg_u64(argc, argv, 3, 0, usage);
    size_t size_max = (size_t)bench_arg_u64(argc, argv, 4, 0, usage);
    if (pairs == 0 || pairs > 512 || size_min < 8 || size_max < size_min || size_max > (1u << 30))
        bench_die("bad arguments\n%s", usage);

    struct ring **rings = malloc(pairs * sizeof *rings);
    if (!rings)
        bench_oom(pairs * sizeof *rings);
    bench_barrier_init(&start_line, (unsigned)(2 * pairs));
    for (uint64_t i = 0; i < pairs; i++) {
        void *mem;
        if (posix_memalign(&mem, 64, sizeof(struct ring)) != 0)
            bench_oom(sizeof(struct ring));
        struct ring *r = memset(mem, 0, sizeof(struct ring));
        r->items = items;
        r->seed = 0x5eed + i;
        r->size_min = size_min;
        r->size_max = size_max;
        rings[i] = r;
    }
    for (uint64_t i = 0; i < pairs; i++) {
        bench_thread_start(bench_timed_producer, rings[i]);
        bench_thread_start(bench_timed_consumer, rings[i]);
    }
    bench_poll_until(&finished, (unsigned)(2 * pairs));
    uint64_t bad = 0, fill_sum = 0;
    for (uint64_t i = 0; i < pairs; i++) {
        bad += rings[i]->bad;
        fill_sum += rings[i]->fill_sum;
    }
    /* How full the rings ran: the blocks in flight, which the peak RSS
     * follows (a producer that outruns its consumer keeps RING_SIZE blocks
     * live; one that falls behind, few). */
    double ring_fill = 100.0 * (double)fill_sum / ((double)(pairs * items) * RING_SIZE);
    for (uint64_t i = 0; i < pairs; i++)
        free(rings[i]);
    free(rings);
    bench_report("producer_consumer", pairs * items, atomic_load(&t_end) - t_start,
                 " pairs=%llu size=%zu-%zu verify_errors=%llu ring_fill_pct=%.1f",
                 (unsigned long long)pairs, size_min, size_max, (unsigned long long)bad, ring_fill);
    if (bad) {
        fprintf(stderr, "producer_consumer: %llu payload verification errors\n",
                (unsigned long long)bad);
        return 1;
    }
    return 0;
}
