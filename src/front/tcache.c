/* The default front: per-thread bins for the tiny classes (up to 1040 B),
 * refilled and flushed in batches (front/batch.c). */
#include "front/front.h"

/* About 32 KiB per class, between 8 and 256 blocks: small classes get deep
 * bins (they are cheap), the 1040-byte class gets 31. */
static uint32_t tcache_capacity(unsigned cls) {
    uint32_t n = 32768u / hak_class_size[cls];
    return n < 8 ? 8 : n > 256 ? 256 : n;
}

const struct hak_cache_ops hak_front_tcache = {
    .name = "tcache",
    .capacity = tcache_capacity,
    .alloc_miss = hak_cache_refill_pop,
    .free_miss = hak_cache_flush_push,
};
