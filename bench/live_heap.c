/* live_heap: a large live heap of mixed sizes, replaced at random (a cache
 * server, an in-memory index, a language runtime's old generation).
 *
 *   live_heap MIB STEPS SEED
 *
 * Fills slots with blocks of 16 B to 128 KiB until about MIB MiB are live
 * (sizes log-uniform: as many blocks of 16-32 B as of 64-128 KiB, so most
 * blocks are small and most bytes are in big ones), then, timed, STEPS
 * times frees a random slot's block and puts a new one of a new random size
 * there. Every block's first 64 bytes and one byte in each of its pages are
 * written, and a block's first byte is checked before it is freed (exit 1 if
 * it changed). The working set is far beyond the caches: what it measures is
 * how an allocator finds room in a big heap, its page faults, and the memory
 * it keeps (peak RSS). One op = one malloc+free pair. */
#include "bench_common.h"

static const char usage[] =
    "usage: live_heap MIB STEPS SEED\n"
    "  e.g. live_heap 512 2000000 42\n";

#define MIN_LG 4    /* 16 B */
#define MAX_LG 17   /* 128 KiB */
#define PAGE 4096u

struct slot {
    unsigned char *p;
    uint32_t size;
    unsigned char tag;
};

static uint64_t errors;

/* log-uniform in [16 B, 128 KiB]: a uniform exponent, then uniform within
 * the power of two */
static size_t pick_size(bench_rng *r)
{
    unsigned lg = MIN_LG + bench_rng_below(r, MAX_LG - MIN_LG);
    size_t lo = (size_t)1 << lg;
    return lo + bench_rng_below(r, (uint32_t)lo);
}

static void fill(struct slot *s, size_t size, unsigned char tag)
{
    unsigned char *p = malloc(size);
    if (!p)
        bench_oom(size);
    memset(p, tag, size < 64 ? size : 64);
    for (size_t i = PAGE; i < size; i += PAGE)
        p[i] = tag;
    s->p = p;
    s->size = (uint32_t)size;
    s->tag = tag;
}

static void drop(struct slot *s)
{
    if (s->p[0] != s->tag)
        errors++;
    free(s->p);
}

static BENCH_NOINLINE void bench_timed_live_heap(struct slot *slots, uint32_t n, uint64_t steps,
                                                 bench_rng *rng)
{
    for (uint64_t i = 0; i < steps; i++) {
        struct slot *s = &slots[bench_rng_below(rng, n)];
        drop(s);
        fill(s, pick_size(rng), (unsigned char)(i | 1));
    }
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 4)
        bench_die("%s", usage);
    uint64_t mib = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t steps = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 3, 0, usage);
    if (mib == 0 || mib > (1u << 20))
        bench_die("MIB must be 1..1048576\n%s", usage);

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    /* the expected block is about 14 KiB; room for twice as many slots */
    size_t cap = (size_t)(mib << 20) / 7000 + 16;
    struct slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        bench_oom(cap * sizeof *slots);
    uint32_t n = 0;
    size_t live = 0;
    while (live < (size_t)(mib << 20) && n < cap) {
        size_t size = pick_size(&rng);
        fill(&slots[n++], size, 1);
        live += size;
    }

    double t0 = bench_now();
    bench_timed_live_heap(slots, n, steps, &rng);
    double t1 = bench_now();

    bench_report("live_heap", steps, t1 - t0, " slots=%u live_mib=%zu", n, live >> 20);
    for (uint32_t i = 0; i < n; i++)
        drop(&slots[i]);
    free(slots);
    if (errors) {
        fprintf(stderr, "live_heap: %llu blocks changed under the program\n",
                (unsigned long long)errors);
        return 1;
    }
    return 0;
}
