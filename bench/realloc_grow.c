/* realloc_grow: strings and vectors grown step by step with realloc.
 *
 *   realloc_grow BUFFERS STEPS SEED
 *
 * BUFFERS buffers, half of them "strings", half "vectors". Each step picks a
 * random buffer and grows it:
 *   - a string is appended 1..32 bytes and realloc'ed to its exact new length
 *     (the naive pattern many programs have);
 *   - a vector gets 1..16 pushes of 8-byte elements, its capacity doubling
 *     with realloc when full.
 * When a buffer passes its own random limit (strings 256 B..16 KiB, vectors
 * 1 KiB..256 KiB) it is either freed or shrunk by realloc to 1/8 (strings) or
 * 1/16 (vectors) of its size. The first and last live bytes are checked after
 * every realloc; the program exits 1 if realloc lost data.
 * One op = one realloc, malloc or free call. */
#include "bench_common.h"

static const char usage[] =
    "usage: realloc_grow BUFFERS STEPS SEED\n"
    "  e.g. realloc_grow 1024 2000000 42\n";

enum { STRING, VECTOR };

struct buf {
    unsigned char *p;
    size_t len;   /* bytes (strings) or elements (vectors) */
    size_t cap;   /* elements, vectors only */
    size_t limit; /* bytes */
    unsigned char kind, tag;
};

static uint64_t errors;

static inline unsigned char str_byte(const struct buf *b, size_t i)
{
    return (unsigned char)(b->tag ^ (unsigned char)(i * 7u));
}

static inline uint64_t vec_elem(const struct buf *b, size_t i)
{
    return ((uint64_t)b->tag << 56) ^ (uint64_t)i;
}

static inline void check_string(const struct buf *b)
{
    if (b->len && (b->p[0] != str_byte(b, 0) || b->p[b->len - 1] != str_byte(b, b->len - 1)))
        errors++;
}

static inline void check_vector(const struct buf *b)
{
    const uint64_t *v = (const uint64_t *)b->p;
    if (b->len && (v[0] != vec_elem(b, 0) || v[b->len - 1] != vec_elem(b, b->len - 1)))
        errors++;
}

static inline void *xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size);
    if (!q)
        bench_oom(size);
    return q;
}

static uint64_t grow_string(struct buf *b, bench_rng *rng)
{
    uint64_t ops = 1;
    size_t add = 1 + bench_rng_below(rng, 32);
    b->p = xrealloc(b->p, b->len + add + 1);
    check_string(b);
    for (size_t i = b->len; i < b->len + add; i++)
        b->p[i] = str_byte(b, i);
    b->len += add;
    b->p[b->len] = '\0';
    if (b->len >= b->limit) {
        ops++;
        if (bench_rng_below(rng, 2)) {
            free(b->p);
            b->p = NULL;
            b->len = 0;
        } else {
            b->len /= 8;
            b->p = xrealloc(b->p, b->len + 1);
            check_string(b);
            b->p[b->len] = '\0';
        }
    }
    return ops;
}

static uint64_t grow_vector(struct buf *b, bench_rng *rng)
{
    uint64_t ops = 0;
    unsigned pushes = 1 + bench_rng_below(rng, 16);
    for (unsigned k = 0; k < pushes; k++) {
        if (b->len == b->cap) {
            b->cap = b->cap ? b->cap * 2 : 4;
            b->p = xrealloc(b->p, b->cap * sizeof(uint64_t));
            ops++;
            check_vector(b);
        }
        uint64_t e = vec_elem(b, b->len);
        memcpy(b->p + b->len * sizeof e, &e, sizeof e);
        b->len++;
    }
    if (b->cap * sizeof(uint64_t) >= b->limit) {
        ops++;
        if (bench_rng_below(rng, 2)) {
            free(b->p);
            b->p = NULL;
            b->len = b->cap = 0;
        } else {
            b->cap /= 16;
            if (b->len > b->cap)
                b->len = b->cap;
            b->p = xrealloc(b->p, b->cap * sizeof(uint64_t));
            check_vector(b);
        }
    }
    return ops;
}

static BENCH_NOINLINE uint64_t bench_timed_realloc_grow(struct buf *bufs, uint32_t n,
                                                       uint64_t steps, bench_rng *rng)
{
    uint64_t ops = 0;
    for (uint64_t s = 0; s < steps; s++) {
        struct buf *b = &bufs[bench_rng_below(rng, n)];
        ops += b->kind == STRING ? grow_string(b, rng) : grow_vector(b, rng);
    }
    return ops;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 4)
        bench_die("%s", usage);
    uint64_t nbuf = bench_arg_u64(argc, argv, 1, 0, usage);
    uint64_t steps = bench_arg_u64(argc, argv, 2, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 3, 0, usage);
    if (nbuf == 0 || nbuf > (1u << 24))
        bench_die("BUFFERS must be 1..2^24\n%s", usage);

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    struct buf *bufs = calloc(nbuf, sizeof *bufs);
    if (!bufs)
        bench_oom(nbuf * sizeof *bufs);
    for (uint64_t i = 0; i < nbuf; i++) {
        bufs[i].kind = (i & 1) ? VECTOR : STRING;
        bufs[i].tag = (unsigned char)(i * 131u + 17u);
        bufs[i].limit = bufs[i].kind == STRING ? bench_rng_range(&rng, 256, 16384)
                                               : bench_rng_range(&rng, 1024, 256 * 1024);
    }

    double t0 = bench_now();
    uint64_t ops = bench_timed_realloc_grow(bufs, (uint32_t)nbuf, steps, &rng);
    double t1 = bench_now();

    for (uint64_t i = 0; i < nbuf; i++)
        free(bufs[i].p);
    free(bufs);
    bench_report("realloc_grow", ops, t1 - t0, " buffers=%llu steps=%llu verify_errors=%llu",
                 (unsigned long long)nbuf, (unsigned long long)steps,
                 (unsigned long long)errors);
    if (errors) {
        fprintf(stderr, "realloc_grow: %llu content checks failed\n", (unsigned long long)errors);
        return 1;
    }
    return 0;
}
