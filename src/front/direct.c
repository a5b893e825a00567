/* "none" for the front (HAKMEM_FRONT=none) or the Pool TLS box
 * (HAKMEM_POOL=none): no per-thread caching. Bins get capacity 0, so every
 * malloc and free of the box's classes misses and comes here, one block at a
 * time, straight to the thread's heap in the SuperSlab pool. Exists to
 * measure what the caches buy. */
#include "front/front.h"
#include "backend/heap.h"

static uint32_t direct_capacity(unsigned cls) {
    (void)cls;
    return 0;
}

static void *direct_alloc_miss(struct hak_tls *t, unsigned cls) {
    hak_cache_trim_idle(t);   /* the other box's bins */
    return hak_heap_take_one(t->heap, cls);
}

static void direct_free_miss(struct hak_tls *t, void *p, unsigned cls) {
    (void)cls;
    hak_cache_free_to_heap(t, p);
    hak_cache_trim_idle(t);
}

const struct hak_cache_ops hak_cache_direct = {
    .name = "none",
    .capacity = direct_capacity,
    .alloc_miss = direct_alloc_miss,
    .free_miss = direct_free_miss,
};
