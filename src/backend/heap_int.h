/* What the heap's files share, and nothing outside them uses. Each file
 * calls only those listed after it:
 *   heap_abandon.c  a thread's heap: adopted or made at start, abandoned at exit
 *   heap_refill.c   a bin's refill: own free blocks, a larger class's, an
 *                   idle heap's (borrowed), new runs
 *   heap_flush.c    a bin's blocks back to their runs or their heaps' inboxes
 *   heap_decay.c    purge on a clock, memory pressure, malloc_trim
 *   heap_orphans.c  exited threads' heaps: their queue, scavenge, absorb
 *   heap_remote.c   inboxes: blocks sent to other heaps, and their drain
 *   heap_runs.c     runs and SuperSlabs: where a new run goes, what an
 *                   emptied one gives back
 *   heap_hollow.c   pages of free blocks inside runs in use
 *   heap_create.c   the registry of heaps, a new heap, stats and fork */
#ifndef HAK_HEAP_INT_H
#define HAK_HEAP_INT_H

#include "backend/heap.h"
#include "base/track.h"
#include "base/link_guard.h"
#include "base/options.h"

/* Every heap ever made, and the queue of abandoned ones (adopted from the
 * head), under lock. The queue's head is written atomically: refill peeks
 * at it without the lock (a hint only). */
struct hak_heap_registry {
    hak_spinlock_t lock;
    struct hak_heap *all;   /* written under lock with release; a heap's next_all never changes */
    struct hak_heap *abandoned, *abandoned_tail;
    struct hak_heap *warm_tail;   /* the last one not scavenged (heap_orphans.c) */
    size_t nabandoned, nwarm;
};
HAK_DATA struct hak_heap_registry hak_heaps;

/* h->dirty_free bookkeeping (the caller holds h's lock): n more, n fewer
 * (never below 0: a SuperSlab that comes from the pool brings its own). */
static inline void hak_heap_dirty_add(struct hak_heap *h, unsigned n) { h->dirty_free += n; }
static inline void hak_heap_dirty_sub(struct hak_heap *h, unsigned n) {
    h->dirty_free = h->dirty_free > n ? h->dirty_free - n : 0;
}

/* The heap's recent high (heap_decay.c, keep_for_recent_high). The high
 * is sampled at ticks and misses the peaks between them: a few slabs over
 * it (1/HAK_HIGH_SLACK_DIV of it) are kept as well rather than purged one
 * stretch a tick. A fixed 16 slabs kept a MiB in each of churn_threads'
 * small heaps (peak RSS +170 KiB in 30 runs). */
#define HAK_HIGH_SLACK_DIV 16u
static inline unsigned hak_heap_slabs_in_runs(const struct hak_heap *h) {
    return h->ss_count * (unsigned)__builtin_popcount(HAK_SS_ALL_FREE) - h->free_slabs;
}
static inline unsigned hak_heap_recent_high(const struct hak_heap *h) {
    unsigned high = h->high_last > h->high_now ? h->high_last : h->high_now;
    return high + high / HAK_HIGH_SLACK_DIV;
}
/* 1 while h's slabs in runs and free dirty ones are no more than it had in
 * runs at its recent high: its free slabs wait for the next crest. */
static inline int hak_heap_within_recent_high(const struct hak_heap *h) {
    return hak_heap_slabs_in_runs(h) + h->dirty_free <= hak_heap_recent_high(h);
}
/* Free slabs h's recent high covers beyond its runs in use: the most its
 * next crest may take again without a page fault. */
static inline unsigned hak_heap_room_under_high(const struct hak_heap *h) {
    unsigned used = hak_heap_slabs_in_runs(h), high = hak_heap_recent_high(h);
    return high > used ? high - used : 0;
}

/* heap_create.c */
struct hak_heap *hak_heap_new(void);   /* a new heap, in the registry (NULL: no memory) */

/* heap_runs.c; the caller holds h's lock */
void hak_heap_partial_push(struct hak_heap *h, struct hak_slab *s);
void hak_heap_partial_unlink(struct hak_heap *h, struct hak_slab *s);
/* Refill takes a class's free blocks that are resident before its hollow
 * ones (heap_hollow.c), whose pages went back and fault in again: a run
 * left with hollow blocks only moves to the end of its class's partial
 * list, and refill looks for a free list in the first
 * HAK_PARTIAL_RESIDENT_SCAN runs before it takes hollow blocks. */
#define HAK_PARTIAL_RESIDENT_SCAN 16u
void hak_heap_partial_demote(struct hak_heap *h, struct hak_slab *s);
/* Adds ss to h's SuperSlabs / takes it out (with its room bucket and free_slabs) */
void hak_heap_ss_link(struct hak_heap *h, struct hak_superslab *ss);
void hak_heap_ss_unlink(struct hak_heap *h, struct hak_superslab *ss);
/* A run with no block out goes back to its SuperSlab; a SuperSlab with no
 * run goes back to the pool, except the heap's last one when keep_last. */
void hak_heap_run_release(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, int keep_last);
/* Purges the slabs h's batch holds now (at a tick, or under pressure). */
void hak_heap_purge_batch(struct hak_heap *h);
/* A new run for cls in one of h's SuperSlabs (NULL: none has room), or in
 * a SuperSlab taken from the pool (NULL: out of memory). */
struct hak_slab *hak_heap_run_in_own(struct hak_heap *h, unsigned cls);
struct hak_slab *hak_heap_run_in_new_ss(struct hak_heap *h, unsigned cls);
/* h's partly used runs with no block out go back to their SuperSlabs (with
 * kept_only, those its flushes kept for their classes only) */
void hak_heap_release_empty_partial_runs(struct hak_heap *h, int kept_only);
/* the same, current runs too */
void hak_heap_release_empty_runs(struct hak_heap *h);
/* every SuperSlab of h with no run goes back to the pool */
void hak_heap_trim(struct hak_heap *h);

/* heap_remote.c: inboxes (the format of what they hold is described there) */
/* Puts the blocks other threads sent to h back on its runs (those of
 * SuperSlabs that moved on go to their new owner); keep_empty: see
 * hak_run_put. The caller holds h's lock. */
void hak_heap_drain_inbox(struct hak_heap *h, int keep_empty);
/* A flush's blocks for other heaps, gathered by owner (up to
 * HAK_SEND_OWNERS at a time) into stretches of one slab each, then sent
 * with one push an owner: a consumer's bin holds blocks of several
 * producers' heaps mixed, and a push for each change of owner made
 * stretches of one or two blocks. */
#define HAK_SEND_OWNERS 4u
struct hak_send_chain {
    struct hak_heap *owner;
    void *first, *last;   /* closed stretches, chained */
    void *head, *tail;    /* the open stretch */
    uintptr_t slab;       /* its slab (address >> HAK_SLAB_SHIFT) */
    unsigned n;           /* its blocks */
};
struct hak_send {
    struct hak_send_chain c[HAK_SEND_OWNERS];
    unsigned used, evict;
    struct hak_send_chain *last;   /* the chain the last block joined */
};
/* p (slab: its slab) joins c's open stretch: same slab, same owner */
static inline void hak_send_prepend(struct hak_send *sd, struct hak_send_chain *c, void *p) {
    hak_list_set(p, c->head);
    c->head = p;
    c->n++;
    sd->last = c;
}
void hak_send_add(struct hak_heap *h, struct hak_send *sd, void *p, uintptr_t slab, struct hak_heap *owner);
void hak_send_all(struct hak_heap *h, struct hak_send *sd);

/* heap_decay.c */
void hak_heap_decay(struct hak_heap *h);          /* on h's misses, under its lock */

/* heap_orphans.c */
/* What an abandoned heap (locked by the caller) holds for nobody goes:
 * its inbox is drained and, once it has waited `period`, its empty runs
 * and then its empty SuperSlabs are released. */
void hak_heap_scavenge_one(struct hak_heap *h, uint32_t now, uint32_t period);
void hak_heap_scavenge_abandoned(void);            /* before h takes a new SuperSlab */
struct hak_heap *hak_heap_abandoned_take_locked(int *busy);
void hak_heap_abandoned_unlock_return(struct hak_heap *h);
struct hak_heap *hak_heap_abandoned_take(void);    /* NULL: none */
void hak_heap_abandoned_add(struct hak_heap *h);   /* its thread exited */
/* Before h takes a new SuperSlab: those of an abandoned heap (h locked) */
int hak_heap_absorb_abandoned(struct hak_heap *h);

/* heap_hollow.c; the caller holds h's lock (pages of free blocks inside
 * runs in use go back: see there) */
/* After a block went back to s: queue s if it is mostly free now (3/4 of
 * its carved blocks). Only partly used runs of blocks of
 * HAK_HOLLOW_MIN_BLOCK bytes and up qualify (backend/superslab.h, where
 * their bitmaps are sized by it). The cheap part of the test
 * is inline, since every block a flush returns passes here and most
 * runs do not qualify: a call for each would cost more than the test. */
void hak_heap_hollow_consider_run(struct hak_heap *h, struct hak_slab *s);
static inline int hak_slab_mostly_free(const struct hak_slab *s) {
    return (uint64_t)s->nfree * 4 >= (uint64_t)s->carved * 3;
}
static inline void hak_heap_hollow_consider(struct hak_heap *h, struct hak_slab *s) {
    if (s->block_size >= HAK_HOLLOW_MIN_BLOCK && !s->queued && s->state == HAK_SLAB_PARTIAL &&
        hak_slab_mostly_free(s))
        hak_heap_hollow_consider_run(h, s);
}
/* s leaves the queue (a block was taken from it, or it left the partial list). */
void hak_heap_hollow_dequeue(struct hak_heap *h, struct hak_slab *s);
/* A new run of `bytes` (its slabs no earlier run made resident: pages to
 * fault in) after a large drop: queued runs, oldest first, with about as
 * many free bytes. */
void hak_heap_hollow_for_growth(struct hak_heap *h, size_t bytes);
/* malloc_trim: the whole queue now (nothing with the clock off); returns
 * how many runs went hollow. */
unsigned hak_heap_hollow_all(struct hak_heap *h);
/* At a decay tick: runs that waited in the queue a whole period. */
void hak_heap_hollow_tick(struct hak_heap *h, uint32_t now, uint32_t period);
/* Moves up to want of s's hollow blocks onto the bin; returns how many. */
unsigned hak_slab_take_hollow(struct hak_slab *s, struct hak_bin *bin, unsigned want);
/* s goes back to its SuperSlab: its bitmap is cleared. */
void hak_slab_hollow_reset(struct hak_slab *s);

/* ---- blocks back to their run (heap_flush.c, and the drain of
 * heap_remote.c), inlined into both loops; the caller holds h's lock */

/* Runs left with no block out that a heap keeps with their class, in
 * slabs, while its clock runs (HAKMEM_DECAY_MS; the tick releases those
 * its recent high does not cover: heap_decay.c). A program whose queue or
 * cache of blocks drains and fills again, producer_consumer's ring among
 * them, empties whole runs of its mid-sized classes at every trough: given
 * back to the SuperSlab, each slab was taken again by whichever class
 * needed a run first, carved anew by a class of another block size, and
 * in the end every slab its classes ever passed through was wholly
 * resident (12-13 of them for 529-1,040 B blocks, against 6-7 of live
 * blocks). Kept, a class finds its own carved blocks at the next crest.
 * A bound, since a class kept to itself is memory no other class may use:
 * classes that empty for good (vectors that double) would keep theirs
 * (docs/PERFORMANCE.md, "Runs"). Tiny classes only: a mid class's run holds a few large blocks,
 * which Pool TLS bins keep already, and a program that frees such blocks
 * expects their slabs to serve any size (unless no bins keep them:
 * hak_heap_keep_mid_runs). */
#define HAK_EMPTY_KEEP_SLABS 8u
#define HAK_EMPTY_KEEP_MID_SLABS 32u   /* with hak_heap_keep_mid_runs: 2 MiB */

static inline int hak_keep_empty_run(const struct hak_heap *h, const struct hak_slab *s) {
    unsigned bound = hak_class_is_tiny(s->cls) ? HAK_EMPTY_KEEP_SLABS
                     : hak_heap_keep_mid_runs ? HAK_EMPTY_KEEP_MID_SLABS : 0;
    return h->empty_slabs + s->nslabs <= bound && hak_opt(HAK_OPT_DECAY_MS);
}

/* Gives n blocks of run s, chained from first to last, back to it; the
 * caller holds the run's heap's lock. A run left with no block out stays
 * with its class when hak_keep_empty_run says so; else it goes back to its
 * SuperSlab, unless keep_empty: a borrower draining another heap's inbox
 * keeps the runs whole, so that their blocks can still be lent
 * (borrow, heap_refill.c); freed slabs of a heap whose thread does not
 * allocate would be of no use to anyone. Returns the run when it stays
 * partly used or empty with its class (the caller then sees whether it
 * should join the hollow queue: done there, where h is at hand anyway,
 * this function saves registers), else NULL.
 * The blocks are block starts of s: every block that reaches a bin, an
 * inbox or this function was checked as one when it was freed (the hit
 * path's class check, hak_free_miss's run check, or the safety box's),
 * so no check is repeated here, where every flushed block passes. */
static inline struct hak_slab *hak_run_put(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, void *first,
                                              void *last, unsigned n, int keep_empty) {
    hak_list_set(last, s->free);
    s->free = first;
    s->nfree += n;
    s->used -= n;
    if (s->state == HAK_SLAB_CURRENT) return NULL;
    if (s->used == 0 && !keep_empty) {
        if (hak_keep_empty_run(h, s)) {
            h->empty_slabs += s->nslabs;
            s->kept = 1;
            if (s->state == HAK_SLAB_FULL) hak_heap_partial_push(h, s);
            return s;
        }
        if (s->state == HAK_SLAB_PARTIAL) hak_heap_partial_unlink(h, s);
        hak_heap_run_release(h, ss, s, 1);
        return NULL;
    }
    if (s->state == HAK_SLAB_FULL) hak_heap_partial_push(h, s);
    return s;
}

/* hak_run_put, then what the heap's hollow runs need to know (heap_hollow.c). */
static inline void hak_run_put_noting(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, void *first,
                                      void *last, unsigned n, int keep_empty, size_t size) {
    struct hak_slab *r = hak_run_put(h, ss, s, first, last, n, keep_empty);
    h->dropped_bytes += (size_t)n * size;
    if (r) hak_heap_hollow_consider(h, r);
}

#endif
