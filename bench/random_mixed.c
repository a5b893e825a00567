/* random_mixed: random slot replacement in a working set of small blocks.
 *
 *   random_mixed CYCLES WS SEED [SIZE]
 *
 * WS slots are filled first (not timed). Each timed cycle picks a random slot,
 * frees its block and puts a new one there: sizes uniform in 16..1040 bytes,
 * or always SIZE when given. The first byte of each block is written.
 * One op = one malloc+free pair. */
#include "bench_common.h"

static const char usage[] =
    "usage: random_mixed CYCLES WS SEED [SIZE]\n"
    "  CYCLES  timed malloc+free pairs (e.g. 10000000)\n"
    "  WS      working-set slots (e.g. 8192)\n"
    "  SEED    PRNG seed\n"
    "  SIZE    fixed block size; default random 16..1040 bytes\n";

#define MIN_SIZE 16
#define MAX_SIZE 1040

static inline size_t pick_size(uint64_t x, size_t fixed)
{
    if (fixed)
        return fixed;
    return MIN_SIZE + (size_t)(((x >> 32) * (uint64_t)(MAX_SIZE - MIN_SIZE + 1)) >> 32);
}

static BENCH_NOINLINE void bench_timed_random_mixed(char **slots, uint32_t ws, uint64_t cycles,
                                                    bench_rng *rng, size_t fixed)
{
    for (uint64_t i = 0; i < cycles; i++) {
        uint64_t x = bench_rng_next(rng);
        uint32_t idx = (uint32_t)(((x & 0xffffffffu) * ws) >> 32);
        size_t size = pick_size(x, fixed);
        free(slots[idx]);
        char *p = malloc(size);
        if (!p)
            bench_oom(size);
        p[0] = (char)i;
        slots[idx] = p;
    }
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc < 4 || argc > 5)
        bench_die("%s", usage);
    uint64_t cycles = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t ws = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 3, 0, usage);
    size_t fixed = (size_t)bench_arg_u64(argc, argv, 4, 0, usage);
    if (ws == 0 || ws > (1u << 30))
        bench_die("WS must be in 1..2^30\n%s", usage);

    char **slots = malloc(ws * sizeof *slots);
    if (!slots)
        bench_oom(ws * sizeof *slots);
    bench_rng rng;
    bench_rng_seed(&rng, seed);
    for (uint64_t i = 0; i < ws; i++) {
        size_t size = pick_size(bench_rng_next(&rng), fixed);
        slots[i] = malloc(size);
        if (!slots[i])
            bench_oom(size);
        slots[i][0] = 1;
    }

    double t0 = bench_now();
    bench_timed_random_mixed(slots, (uint32_t)ws, cycles, &rng, fixed);
    double t1 = bench_now();

    for (uint64_t i = 0; i < ws; i++)
        free(slots[i]);
    free(slots);
    bench_report("random_mixed", cycles, t1 - t0,
                 " ws=%llu size=%s%zu", (unsigned long long)ws,
                 fixed ? "" : "16-", fixed ? fixed : (size_t)MAX_SIZE);
    return 0;
}
