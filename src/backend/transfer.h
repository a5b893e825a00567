/* The transfer cache: batches of free blocks of other heaps that a thread's
 * full bin gave up, kept for the next thread whose bin of that class runs
 * empty, instead of being sent home at once.
 *
 * When threads free what other threads allocated (pipelines, rings, a
 * consumer fed by producers), a full bin's batch sent home costs its
 * owner a drain and a walk of the blocks' links, each a cache line the
 * freeing core wrote last; and each heap's runs keep the free blocks sent
 * to it until its own thread misses, while the thread that freed them
 * carves new ones. Kept here, the batch goes whole, with no walk, to the
 * next bin of its class that misses, whatever its heap: that thread's
 * mallocs touch each block once, as they would have had it stayed in the
 * freeing thread's bin. thread_ring 8 and 32 threads: docs/PERFORMANCE.md,
 * "Remote frees and idle heaps".
 *
 * A few batches a class (HAK_XFER_SLOTS of at most half a bin each, tiny
 * classes only); a batch that finds no free slot goes home as before. A
 * batch left for a decay period goes home (hak_xfer_send_idle); so does
 * every batch on memory pressure and malloc_trim. */
#ifndef HAK_TRANSFER_H
#define HAK_TRANSFER_H

#include "base/tls.h"

#include <stdatomic.h>

struct hak_heap;

#define HAK_XFER_SLOTS 4u

struct hak_xfer_batch {
    void *first, *last;
    uint32_t n;
    uint32_t put_ms;   /* when it came (hak_os_clock_ms) */
};

/* One class's batches, oldest first; a cache line or two of its own, away
 * from the other classes' locks. */
struct hak_xfer_class {
    _Alignas(64) hak_spinlock_t lock;
    _Atomic uint32_t used;   /* read without the lock as a hint */
    struct hak_xfer_batch b[HAK_XFER_SLOTS];
};
HAK_DATA struct hak_xfer_class hak_xfer[HAK_NBINS];

/* Bit c set while class c (< 64) has a batch waiting; changed under the
 * class's lock. A hint for hak_xfer_larger_waiting. */
HAK_DATA _Atomic uint64_t hak_xfer_mask;

/* 1 when class cls may have a batch waiting: a hint, read without the
 * lock, so that a refill of a class with none costs a load, not a call. */
static inline int hak_xfer_waiting(unsigned cls) {
    return atomic_load_explicit(&hak_xfer[cls].used, memory_order_relaxed) != 0;
}

/* Moves the first n blocks of bin b (of tiny class cls) into the cache as
 * one batch and returns 1, or returns 0 (nothing moved) when the class has
 * no free slot. *foreign: how many of them are not self's (the freeing
 * thread's heap), for the remote-free count. */
int hak_xfer_put(unsigned cls, struct hak_bin *b, unsigned n, const struct hak_heap *self, unsigned *foreign);
/* Moves the newest batch of class cls onto the empty bin b and returns its
 * blocks (b's room goes down by as many, not below 0), or 0 if none. */
unsigned hak_xfer_take(unsigned cls, struct hak_bin *b);
/* A larger class's batch for a tiny class cls whose refill would carve
 * new pages (front/batch.c): its blocks stand in for cls's
 * (hak_class_stands_in), like a larger class's free blocks in the heap's
 * runs. Moves it onto the empty bin b as hak_xfer_take does, or returns
 * 0. hak_xfer_larger_waiting is its hint, loads only. */
static inline int hak_xfer_larger_waiting(unsigned cls) {
    /* one load when no class above cls has a batch (a single thread's
     * refills, every time) */
    if (cls < 63 && !(atomic_load_explicit(&hak_xfer_mask, memory_order_relaxed) >> (cls + 1))) return 0;
    for (unsigned big = cls + 1; big < HAK_NCLASS && hak_class_size[big] <= 2 * hak_class_size[cls]; big++)
        if (hak_xfer_waiting(big) && hak_class_stands_in(big, cls)) return 1;
    return 0;
}
unsigned hak_xfer_take_larger(unsigned cls, struct hak_bin *b);
/* Batches kept period ms or more go home through h (the caller's heap,
 * not locked: their blocks go to their runs or their owners' inboxes).
 * period 0: every batch. */
void hak_xfer_send_idle(struct hak_heap *h, uint32_t period);
/* 1 if p is in a batch of class cls (double-free check; slow). */
int hak_xfer_holds(const void *p, unsigned cls);
void hak_xfer_fork_prepare(void);
void hak_xfer_fork_parent(void);
void hak_xfer_fork_child(void);

#endif
