/* HAKMEM_POOL=none (and the only Pool TLS box of a -Dpool=off build): no
 * per-thread caching of mid sizes. Bins get capacity 0, so every mid malloc
 * and free misses and goes one block at a time straight to the thread's
 * heap in the SuperSlab pool. */
#include "pool/pool.h"
#include "front/front.h"

static uint32_t none_capacity(unsigned cls) {
    (void)cls;
    return 0;
}

const struct hak_pool_ops hak_pool_none = {
    .name = "none",
    .capacity = none_capacity,
    .alloc_miss = hak_cache_take_one,
    .free_miss = hak_cache_give_one,
};
