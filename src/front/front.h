/* Front cache box contract: per-thread caching of the tiny classes (up to
 * 1040 B, hak_class_is_tiny), and the bin code it shares with the Pool TLS
 * box (pool/pool.h, mid classes), which may use everything declared here.
 *
 * A box's hit path is NOT in this table: malloc pops bins[cls] and free
 * pushes onto it inline, with no call, when the bin has a block (malloc) or
 * room (free). The ops run only on a miss, so which implementation is chosen
 * costs nothing on a hit.
 *
 * Preconditions for every op: the calling thread is set up (hak_tls.state ==
 * 1, hak_tls.heap != NULL) and cls is a tiny class. */
#ifndef HAK_FRONT_H
#define HAK_FRONT_H

#include "base/tls.h"

struct hak_cache_ops {
    const char *name;
    /* Blocks a bin of class cls may hold; 0 makes every call a miss. */
    uint32_t (*capacity)(unsigned cls);
    /* malloc found bins[cls] empty: return one block, or NULL (no memory). */
    void *(*alloc_miss)(struct hak_tls *t, unsigned cls);
    /* free found bins[cls] full: take p, a validated block of class cls that
     * is still the program's (not yet marked free). */
    void (*free_miss)(struct hak_tls *t, void *p, unsigned cls);
};

HAK_DATA const struct hak_cache_ops hak_front_tcache;
HAK_DATA const struct hak_cache_ops hak_front_none;

/* The box chosen at init; frozen afterwards. */
HAK_DATA const struct hak_cache_ops *hak_front;

/* A bin's capacity starts small and doubles on every refill up to its
 * box's capacity for the class (hak_bin_limit, fixed at init): a thread
 * that allocates a class rarely keeps a few blocks of it, not a full bin
 * (and carves no more of its run than it uses), while a busy class reaches
 * full depth after a handful of misses. Frees alone grow it to
 * HAK_BIN_FREE_MAX at most: a thread that only frees a class (a consumer)
 * sends it back in batches of that many (hak_cache_flush_push) instead of
 * keeping a full bin. */
#define HAK_BIN_START 4u
#define HAK_BIN_FREE_MAX 8u
/* A thread's bins start unprimed: capacity 0, so the first free of a class
 * misses too. Freeing a block of another heap into a bin of a class the
 * thread has not malloc'ed hands that block to the thread's next malloc of
 * the class: a thread given an object another thread allocated (a
 * dispatcher's request, a counter) then lives in that thread's memory,
 * beside the blocks given to other threads, for good, and the threads'
 * writes fight over cache lines (false_sharing ran at half the speed of
 * allocators that return such a block to its owner). So such a free sends
 * the block home, and the bin is primed (HAK_BIN_START of room) by the
 * thread's first malloc miss of the class, which takes blocks of its own
 * heap, or after HAK_SEND_HOME_MAX frees sent home, so that a thread that
 * only frees a class (a consumer) still sends its blocks back in batches.
 * Blocks of the thread's own heap (one it adopted) prime the bin at once. */
#define HAK_SEND_HOME_MAX 8u
HAK_DATA uint32_t hak_bin_limit[HAK_NBINS];

/* A mid-size miss that finds no free block of its class resident in the
 * thread's heap would carve new pages. If the thread's own bin of a class
 * up to twice as large holds a free block, that block is handed out
 * instead, up to HAK_STANDIN_MAX times per class in a thread's life
 * (hak_tls.standins). A thread that needs a class only briefly then keeps
 * no pages of its own for it: churn_threads (short threads, 8 blocks of
 * 1-32 KiB over about 20 classes each) kept a run's pages per class per
 * heap. Unbounded, a class served this way never gets blocks of its own
 * and misses on every malloc (mid_large_mt 0.35x); bounded, a thread that
 * keeps using the class carves its own after the first few. Tiny classes
 * are left out: their misses are many and a page of their blocks is cheap.
 * Numbers in docs/PERFORMANCE.md, "Refill and carving". */
#define HAK_STANDIN_MAX 8u
/* Fixes hak_bin_limit of the tiny classes (tiny = 1) or of the mid ones
 * (tiny = 0) from their box's capacity, at init. */
void hak_cache_limits_init(int tiny, uint32_t (*capacity)(unsigned cls));
void hak_cache_thread_init(struct hak_tls *t);

/* Batch moves between a bin and the thread's heap, for caching boxes:
 * refill half a bin and pop one block; or flush down to half and push p. */
void *hak_cache_refill_pop(struct hak_tls *t, unsigned cls);
void  hak_cache_flush_push(struct hak_tls *t, void *p, unsigned cls);
/* The misses of a box with no bins (capacity 0, front/direct.c): one block
 * from the thread's heap; p straight back to its heap. */
void *hak_cache_take_one(struct hak_tls *t, unsigned cls);
void  hak_cache_give_one(struct hak_tls *t, void *p, unsigned cls);
/* Sends p (a validated block the program just freed) straight back to its
 * heap, past the bin: to its run, or to its owner's inbox. */
void  hak_cache_free_to_heap(struct hak_tls *t, void *p);
/* On a miss (any box): bins with no pop since the heap's last decay tick
 * or step of growth go back to the heap (front/batch.c). */
void  hak_cache_trim_idle(struct hak_tls *t);
/* The same look at the mid bins only, but keep's (pool/tls.c: a thread
 * whose mid bins hold more than its share). */
void  hak_cache_trim_mid(struct hak_tls *t, unsigned keep);
/* Every cached block back to the heaps that own it: at thread exit
 * (keep_runs: runs emptied stay with the heap, for the thread that adopts
 * it) or under memory pressure (they go back to their SuperSlabs). */
void  hak_cache_flush_all(struct hak_tls *t, int keep_runs);

#endif
