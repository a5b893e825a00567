/* big_heap: a program that builds a large heap of small blocks, drops it
 * and builds it again (a cache or an index rebuilt, a batch job's passes).
 *
 *   big_heap MIB MIN MAX SEED
 *
 *   A. allocate blocks of MIN..MAX bytes (uniform) until MIB MiB are
 *      requested, writing the first byte of each;
 *   B. free them all, in allocation order;
 *   C. allocate the same sizes again; D. free them all.
 * What it measures is the allocator's slow paths at scale: a new run or
 * chunk every few hundred blocks among thousands, and memory given back
 * and taken again. One op = one malloc (each block is freed once). */
#include "bench_common.h"

static const char usage[] =
    "usage: big_heap MIB MIN MAX SEED\n"
    "  e.g. big_heap 1024 16 256 42\n";

static void fill(char **blocks, const uint32_t *sizes, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        blocks[i] = malloc(sizes[i]);
        if (!blocks[i])
            bench_oom(sizes[i]);
        blocks[i][0] = (char)i;
    }
}

static uint64_t drop(char **blocks, uint64_t n)
{
    uint64_t check = 0;
    for (uint64_t i = 0; i < n; i++) {
        check += (unsigned char)(blocks[i][0] ^ (char)i);
        free(blocks[i]);
    }
    return check;
}

static BENCH_NOINLINE uint64_t bench_timed_big_heap(char **blocks, const uint32_t *sizes,
                                                    uint64_t n, uint64_t *errors)
{
    for (int pass = 0; pass < 2; pass++) {
        fill(blocks, sizes, n);
        *errors += drop(blocks, n);
    }
    return 2 * n;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 5)
        bench_die("%s", usage);
    uint64_t mib = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t lo = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t hi = bench_arg_u64(argc, argv, 3, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 4, 0, usage);
    if (mib == 0 || mib > (1u << 16) || lo == 0 || hi < lo || hi > (1u << 20))
        bench_die("MIB must be 1..65536 and 1 <= MIN <= MAX <= 1 MiB\n%s", usage);

    /* the sizes first, so that the timed section only allocates */
    uint64_t want = mib << 20, n = 0, cap = want / lo + 1;
    uint32_t *sizes = malloc(cap * sizeof *sizes);
    char **blocks = malloc(cap * sizeof *blocks);
    if (!sizes || !blocks)
        bench_oom(cap * sizeof *blocks);
    bench_rng rng;
    bench_rng_seed(&rng, seed);
    for (uint64_t bytes = 0; bytes < want; n++) {
        sizes[n] = (uint32_t)bench_rng_range(&rng, lo, hi);
        bytes += sizes[n];
    }

    uint64_t errors = 0;
    double t0 = bench_now();
    uint64_t ops = bench_timed_big_heap(blocks, sizes, n, &errors);
    double t1 = bench_now();
    free(blocks);
    free(sizes);
    bench_report("big_heap", ops, t1 - t0, " blocks=%llu verify_errors=%llu",
                 (unsigned long long)n, (unsigned long long)errors);
    if (errors) {
        fprintf(stderr, "big_heap: %llu blocks changed while live\n", (unsigned long long)errors);
        return 1;
    }
    return 0;
}
