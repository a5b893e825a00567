/* Pool TLS box: mid sizes (1 KiB to 256 KiB) from per-thread arenas. The
 * arenas are the runs the thread's heap carves in its own SuperSlabs (so the
 * owner allocates and frees with no atomic read-modify-write); this box adds
 * per-thread bins sized by bytes, so a mid-size hit is as cheap as a tiny
 * one and a miss moves a batch. Blocks freed by other threads reach the
 * owner through its lock-free inbox (backend/heap.c). */
#include "front/front.h"

/* About 512 KiB per class, between 4 and 64 blocks: measured faster and
 * no larger in RSS than 256 KiB on mid_large_mt (fewer refill/flush trips). */
static uint32_t pool_capacity(unsigned cls) {
    uint32_t n = (512u << 10) / hak_class_size[cls];
    return n < 4 ? 4 : n > 64 ? 64 : n;
}

const struct hak_cache_ops hak_pool_tls = {
    .name = "tls",
    .capacity = pool_capacity,
    .alloc_miss = hak_cache_refill_pop,
    .free_miss = hak_cache_flush_push,
};
