/* HAKMEM_FRONT=none: no per-thread caching. Bins have capacity 0, so every
 * malloc and free misses and comes here, one block at a time, straight to the
 * thread's heap. Exists to measure what the front cache buys. */
#include "front/front.h"
#include "backend/heap.h"

static uint32_t direct_capacity(unsigned cls) {
    (void)cls;
    return 0;
}

static void *direct_alloc_miss(struct hak_tls *t, unsigned cls) {
    struct hak_bin one = { 0 };
    if (!hak_heap_refill(t->heap, cls, &one, 1)) return NULL;
    return one.head;
}

static void direct_free_miss(struct hak_tls *t, void *p, unsigned cls) {
    (void)cls;
    struct hak_bin one = { .head = p, .count = 1 };
    *(void **)p = NULL;
    hak_heap_flush(t->heap, &one, 1);
}

static void direct_flush_all(struct hak_tls *t) {
    (void)t;   /* nothing is ever cached */
}

const struct hak_front_ops hak_front_direct = {
    .name = "none",
    .capacity = direct_capacity,
    .alloc_miss = direct_alloc_miss,
    .free_miss = direct_free_miss,
    .flush_all = direct_flush_all,
};
