/* Pool TLS box contract: per-thread caching of the mid classes (1041 B to
 * 256 KiB, !hak_class_is_tiny), over the thread's heap in the SuperSlab
 * pool.
 *
 * Like the front cache (front/front.h), the box's hit path is not in this
 * table: malloc pops hak_tls.bins[cls] and free pushes onto it inline, with
 * no call, when the bin has a block (malloc) or room (free); the ops run
 * only on a miss. A box keeps its blocks in those bins and may use the
 * front's shared batch moves (hak_cache_refill_pop, hak_cache_flush_push)
 * and one-block moves (hak_cache_take_one, hak_cache_give_one).
 *
 * Preconditions for every op: the calling thread is set up (hak_tls.state
 * == 1, hak_tls.heap != NULL) and cls is a mid class.
 *
 * Implementations: tls (pool/tls.c, built with -Dpool=on, the default) and
 * none (pool/none.c, always built). */
#ifndef HAK_POOL_H
#define HAK_POOL_H

#include "base/tls.h"

struct hak_pool_ops {
    const char *name;
    /* Blocks a bin of class cls may hold; 0 makes every call a miss. */
    uint32_t (*capacity)(unsigned cls);
    /* malloc found bins[cls] empty: return one block, or NULL (no memory). */
    void *(*alloc_miss)(struct hak_tls *t, unsigned cls);
    /* free found bins[cls] full: take p, a validated block of class cls that
     * is still the program's (not yet marked free). */
    void (*free_miss)(struct hak_tls *t, void *p, unsigned cls);
};

HAK_DATA const struct hak_pool_ops hak_pool_tls;    /* only with -Dpool=on */
HAK_DATA const struct hak_pool_ops hak_pool_none;

/* The box chosen at init; frozen afterwards. */
HAK_DATA const struct hak_pool_ops *hak_pool;

#endif
