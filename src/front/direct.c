/* HAKMEM_FRONT=none: no per-thread caching of tiny sizes. Bins get
 * capacity 0, so every tiny malloc and free misses and comes here, one
 * block at a time, straight to the thread's heap in the SuperSlab pool.
 * Exists to measure what the cache buys. Its misses serve the Pool TLS
 * box's "none" too (pool/none.c). */
#include "front/front.h"
#include "backend/heap.h"

static uint32_t direct_capacity(unsigned cls) {
    (void)cls;
    return 0;
}

void *hak_cache_take_one(struct hak_tls *t, unsigned cls) {
    hak_cache_trim_idle(t);   /* the other box's bins */
    return hak_heap_take_one(t->heap, cls);
}

void hak_cache_give_one(struct hak_tls *t, void *p, unsigned cls) {
    (void)cls;
    hak_cache_free_to_heap(t, p);
    hak_cache_trim_idle(t);
}

const struct hak_cache_ops hak_front_none = {
    .name = "none",
    .capacity = direct_capacity,
    .alloc_miss = hak_cache_take_one,
    .free_miss = hak_cache_give_one,
};
