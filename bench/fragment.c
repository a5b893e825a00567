/* fragment: memory efficiency under fragmentation (not a speed workload).
 *
 *   fragment COUNT SEED
 *
 *   A. allocate COUNT blocks of mixed sizes (80% 16..256 B, 19% 257 B..4 KiB,
 *      1% 4..64 KiB), each written in full;
 *   B. free 90% of them, chosen at random;
 *   C. allocate COUNT/2 blocks from a shifted mix (sizes x1.5), written in full;
 *   D. free 90% of all live blocks, chosen at random.
 * Reports peak RSS, RSS at the end of D (final_rss_kb: how much of the
 * freed memory went back), and live_kb, the bytes still requested at the end.
 * One op = one malloc (each block is also freed once, at the latest at exit). */
#include "bench_common.h"

static const char usage[] =
    "usage: fragment COUNT SEED\n"
    "  e.g. fragment 200000 42\n";

static inline size_t pick_size(bench_rng *rng)
{
    uint32_t r = bench_rng_below(rng, 100);
    if (r < 80)
        return bench_rng_range(rng, 16, 256);
    if (r < 99)
        return bench_rng_range(rng, 257, 4096);
    return bench_rng_range(rng, 4097, 64 * 1024);
}

struct block {
    char *p;
    size_t size;
};

static inline void alloc_block(struct block *b, size_t size, uint64_t i)
{
    b->p = malloc(size);
    if (!b->p)
        bench_oom(size);
    memset(b->p, (int)(i & 0xff), size);
    b->size = size;
}

/* Frees each live block in [0, n) with probability 9/10. */
static void free_most(struct block *blocks, uint64_t n, bench_rng *rng)
{
    for (uint64_t i = 0; i < n; i++) {
        if (blocks[i].p && bench_rng_below(rng, 10) != 0) {
            free(blocks[i].p);
            blocks[i].p = NULL;
        }
    }
}

static BENCH_NOINLINE uint64_t bench_timed_fragment(struct block *blocks, uint64_t count,
                                                   bench_rng *rng)
{
    for (uint64_t i = 0; i < count; i++)
        alloc_block(&blocks[i], pick_size(rng), i);
    free_most(blocks, count, rng);
    uint64_t again = count / 2;
    for (uint64_t i = count; i < count + again; i++)
        alloc_block(&blocks[i], pick_size(rng) * 3 / 2, i);
    free_most(blocks, count + again, rng);
    return count + again;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 3)
        bench_die("%s", usage);
    uint64_t count = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 2, 0, usage);
    if (count == 0 || count > (1u << 28))
        bench_die("COUNT must be 1..2^28\n%s", usage);

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    uint64_t total = count + count / 2;
    struct block *blocks = calloc(total, sizeof *blocks);
    if (!blocks)
        bench_oom(total * sizeof *blocks);

    double t0 = bench_now();
    uint64_t ops = bench_timed_fragment(blocks, count, &rng);
    double t1 = bench_now();

    long final_rss = bench_current_rss_kb();
    size_t live = 0;
    for (uint64_t i = 0; i < total; i++)
        if (blocks[i].p)
            live += blocks[i].size;
    for (uint64_t i = 0; i < total; i++)
        free(blocks[i].p);
    free(blocks);
    bench_report("fragment", ops, t1 - t0, " final_rss_kb=%ld live_kb=%zu",
                 final_rss, live / 1024);
    return 0;
}
