/* Pool TLS box: mid sizes (1041 B to 256 KiB) from per-thread arenas. The
 * arenas are the runs the thread's heap carves in its own SuperSlabs (so the
 * owner allocates and frees with no atomic read-modify-write); this box adds
 * per-thread bins sized by bytes, so a mid-size hit is as cheap as a tiny
 * one and a miss moves a batch. Blocks freed by other threads reach the
 * owner through its lock-free inbox (backend/heap_remote.c). */
#include "pool/pool.h"
#include "front/front.h"
#include "backend/heap.h"

/* Up to 2 MiB a class, between 4 and 128 blocks (bins start at 4 and grow
 * only while the thread keeps missing, front/front.h). Deep enough that a
 * class's bin rides out the ups and downs of a random mix of sizes without
 * flushing: every flush sends blocks back to their runs, and the refills
 * that follow bring other, colder blocks, or carve new ones: smaller bins
 * were both slower and larger (docs/PERFORMANCE.md, "Thread caches"). */
static uint32_t pool_capacity(unsigned cls) {
    uint32_t n = (2048u << 10) / hak_class_size[cls];
    return n < 4 ? 4 : n > 128 ? 128 : n;
}

/* What the mid bins of all threads hold together, shared out among the
 * threads that own a heap, with a floor for each. A thread's bins hold a
 * few blocks of every mid class it uses, whole blocks the program wrote:
 * 64 threads over 40 classes of 1-32 KiB kept about 1 MiB each in bins,
 * the most of their peak, where a program of one or two threads needs
 * deep bins of its classes (mid_large_mt: 8 MiB a thread). Checked on
 * mid misses, every HAK_POOL_LOOK_EVERY-th (docs/PERFORMANCE.md, "Thread
 * caches"). */
#define HAK_POOL_BINS_TOTAL (32u << 20)
#define HAK_POOL_BINS_MIN (256u << 10)

static size_t share(void) {
    unsigned n = hak_heaps_owned();
    size_t s = HAK_POOL_BINS_TOTAL / (n ? n : 1);
    return s < HAK_POOL_BINS_MIN ? HAK_POOL_BINS_MIN : s;
}

static size_t mid_bin_bytes(const struct hak_tls *t) {
    size_t bytes = 0;
    for (unsigned c = HAK_TINY_LAST + 1; c <= HAK_MID_LAST; c++)
        bytes += (size_t)hak_bin_count(&t->bins[c]) * hak_class_size[c];
    return bytes;
}

/* Mid misses between two looks at a thread's bins while they are within
 * its share: the sum over every mid class at each miss cost mid_large_mt
 * 1.8% of its instructions. Over it, the next miss looks again. */
#define HAK_POOL_LOOK_EVERY 8u
static __thread uint8_t misses_to_look __attribute__((tls_model("initial-exec")));

/* Over its share, a thread's mid bins that had no pop or push since the
 * last look go back to the heap (but cls's, which the miss is about). */
static void over_share(struct hak_tls *t, unsigned cls) {
    if (misses_to_look) {
        misses_to_look--;
        return;
    }
    if (mid_bin_bytes(t) <= share()) {
        misses_to_look = HAK_POOL_LOOK_EVERY - 1;
        return;
    }
    hak_cache_trim_mid(t, cls);
}

static void *pool_refill_pop(struct hak_tls *t, unsigned cls) {
    over_share(t, cls);
    return hak_cache_refill_pop(t, cls);
}

static void pool_flush_push(struct hak_tls *t, void *p, unsigned cls) {
    over_share(t, cls);
    hak_cache_flush_push(t, p, cls);
}

const struct hak_pool_ops hak_pool_tls = {
    .name = "tls",
    .capacity = pool_capacity,
    .alloc_miss = pool_refill_pop,
    .free_miss = pool_flush_push,
};
