/* large_churn: large blocks replaced and resized at random (buffers of a
 * service: request bodies, decoded images, sort runs).
 *
 *   large_churn SLOTS STEPS MIN_KIB MAX_KIB SEED
 *
 * SLOTS live blocks of MIN_KIB..MAX_KIB KiB (uniform). Each step picks a
 * random slot: three times in four the block is freed and a new one of a
 * random size allocated, otherwise it is realloc'ed to a random size.
 * Every page of a new block, and of the part a realloc adds, is written
 * (one byte a page); the first and last bytes are checked after every
 * realloc, and the program exits 1 if realloc lost them. What it measures
 * is the large path: mapping, unmapping, reuse, mremap, page faults, and
 * the memory kept for them (peak RSS). One op = one malloc, free or
 * realloc call. */
#include "bench_common.h"

static const char usage[] =
    "usage: large_churn SLOTS STEPS MIN_KIB MAX_KIB SEED\n"
    "  e.g. large_churn 16 20000 256 8192 42\n";

#define PAGE 4096u

struct slot {
    unsigned char *p;
    size_t size;
    unsigned char tag;
};

static uint64_t errors;

static void touch(unsigned char *p, size_t from, size_t to, unsigned char tag)
{
    for (size_t i = from; i < to; i += PAGE)
        p[i] = tag;
    if (to > from)
        p[to - 1] = tag;
}

static BENCH_NOINLINE uint64_t bench_timed_large_churn(struct slot *s, uint32_t n, uint64_t steps,
                                                      size_t lo, size_t hi, bench_rng *rng)
{
    uint64_t ops = 0;
    for (uint64_t k = 0; k < steps; k++) {
        struct slot *b = &s[bench_rng_below(rng, n)];
        size_t size = bench_rng_range(rng, lo, hi);
        if (bench_rng_below(rng, 4)) {
            free(b->p);
            b->p = malloc(size);
            if (!b->p)
                bench_oom(size);
            b->tag++;
            touch(b->p, 0, size, b->tag);
            ops += 2;
        } else {
            unsigned char *q = realloc(b->p, size);
            if (!q)
                bench_oom(size);
            if (q[0] != b->tag || (size >= b->size && q[b->size - 1] != b->tag))
                errors++;
            if (size > b->size)
                touch(q, b->size, size, b->tag);
            else
                q[size - 1] = b->tag;
            b->p = q;
            ops++;
        }
        b->size = size;
    }
    return ops;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 6)
        bench_die("%s", usage);
    uint64_t n = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t steps = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t lo = bench_arg_u64(argc, argv, 3, 0, usage) * 1024;
    uint64_t hi = bench_arg_u64(argc, argv, 4, 0, usage) * 1024;
    uint64_t seed = bench_arg_u64(argc, argv, 5, 0, usage);
    if (n == 0 || n > (1u << 20) || lo == 0 || hi < lo || hi - lo >= UINT32_MAX)
        bench_die("SLOTS must be 1..2^20 and 0 < MIN_KIB <= MAX_KIB\n%s", usage);

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    struct slot *s = calloc(n, sizeof *s);
    if (!s)
        bench_oom(n * sizeof *s);
    for (uint64_t i = 0; i < n; i++) {
        s[i].size = bench_rng_range(&rng, lo, hi);
        s[i].p = malloc(s[i].size);
        if (!s[i].p)
            bench_oom(s[i].size);
        s[i].tag = (unsigned char)i;
        touch(s[i].p, 0, s[i].size, s[i].tag);
    }

    double t0 = bench_now();
    uint64_t ops = bench_timed_large_churn(s, (uint32_t)n, steps, lo, hi, &rng);
    double t1 = bench_now();

    for (uint64_t i = 0; i < n; i++)
        free(s[i].p);
    free(s);
    bench_report("large_churn", ops, t1 - t0, " slots=%llu steps=%llu verify_errors=%llu",
                 (unsigned long long)n, (unsigned long long)steps, (unsigned long long)errors);
    if (errors) {
        fprintf(stderr, "large_churn: %llu content checks failed\n", (unsigned long long)errors);
        return 1;
    }
    return 0;
}
