/* The default front: per-thread bins refilled in batches from the thread's
 * heap and flushed back in batches, so the heap (and any atomic it needs for
 * remote frees) is touched once per batch, not once per call. */
#include "front/front.h"
#include "backend/heap.h"

/* Bin capacity by class: about 32 KiB per tiny class, 256 KiB per mid
 * class, within bounds that keep small classes from hoarding. */
static uint32_t tcache_capacity(unsigned cls) {
    uint32_t size = hak_class_size[cls];
    if (size <= HAK_TINY_MAX) {
        uint32_t n = 32768u / size;
        return n < 8 ? 8 : n > 256 ? 256 : n;
    }
    uint32_t n = (256u << 10) / size;
    return n < 2 ? 2 : n > 32 ? 32 : n;
}

static void *tcache_alloc_miss(struct hak_tls *t, unsigned cls) {
    struct hak_bin *b = &t->bins[cls];
    unsigned want = b->max / 2;
    if (!hak_heap_refill(t->heap, cls, b, want ? want : 1)) return NULL;
    void *p = b->head;
    b->head = *(void **)p;
    b->count--;
    return p;
}

static void tcache_free_miss(struct hak_tls *t, void *p, unsigned cls) {
    struct hak_bin *b = &t->bins[cls];
    if (b->count >= b->max)
        hak_heap_flush(t->heap, b, b->count - b->max / 2);
    *(void **)p = b->head;
    b->head = p;
    b->count++;
}

static void tcache_flush_all(struct hak_tls *t) {
    for (unsigned c = 0; c < HAK_NCLASS; c++)
        if (t->bins[c].count) hak_heap_flush(t->heap, &t->bins[c], t->bins[c].count);
}

const struct hak_front_ops hak_front_tcache = {
    .name = "tcache",
    .capacity = tcache_capacity,
    .alloc_miss = tcache_alloc_miss,
    .free_miss = tcache_free_miss,
    .flush_all = tcache_flush_all,
};
