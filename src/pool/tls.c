/* Pool TLS box: mid sizes (1041 B to 256 KiB) from per-thread arenas. The
 * arenas are the runs the thread's heap carves in its own SuperSlabs (so the
 * owner allocates and frees with no atomic read-modify-write); this box adds
 * per-thread bins sized by bytes, so a mid-size hit is as cheap as a tiny
 * one and a miss moves a batch. Blocks freed by other threads reach the
 * owner through its lock-free inbox (backend/heap_remote.c). */
#include "pool/pool.h"
#include "front/front.h"

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

const struct hak_pool_ops hak_pool_tls = {
    .name = "tls",
    .capacity = pool_capacity,
    .alloc_miss = hak_cache_refill_pop,
    .free_miss = hak_cache_flush_push,
};
