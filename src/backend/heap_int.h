/* What the heap's four files share, and nothing outside them uses:
 * heap.c (refill, flush, inboxes), heap_runs.c (runs and SuperSlabs: where
 * a new run goes, what an emptied one gives back), heap_idle.c (memory
 * nobody uses: exited threads' heaps, purge on a clock) and heap_share.c
 * (blocks and SuperSlabs that move from one heap to another). */
#ifndef HAK_HEAP_INT_H
#define HAK_HEAP_INT_H

#include "backend/heap.h"
#include "base/track.h"

/* Every heap ever made, and the queue of abandoned ones (adopted from the
 * head), under lock. The queue's head is written atomically: refill peeks
 * at it without the lock (a hint only). */
struct hak_heap_registry {
    hak_spinlock_t lock;
    struct hak_heap *all;   /* written under lock with release; a heap's next_all never changes */
    struct hak_heap *abandoned, *abandoned_tail;
    size_t nabandoned;
};
HAK_DATA struct hak_heap_registry hak_heaps;

/* h->dirty_free bookkeeping (the caller holds h's lock): n more, n fewer
 * (never below 0: a SuperSlab that comes from the pool brings its own). */
static inline void hak_heap_dirty_add(struct hak_heap *h, unsigned n) { h->dirty_free += n; }
static inline void hak_heap_dirty_sub(struct hak_heap *h, unsigned n) {
    h->dirty_free = h->dirty_free > n ? h->dirty_free - n : 0;
}

/* heap_runs.c; the caller holds h's lock */
void hak_heap_partial_push(struct hak_heap *h, struct hak_slab *s);
void hak_heap_partial_unlink(struct hak_heap *h, struct hak_slab *s);
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

/* heap.c; the caller holds h's lock */
/* Free blocks of h's runs of class cls onto the bin (0 if none). */
unsigned hak_heap_take_own(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want);
/* Gives n blocks of run s (of SuperSlab ss), chained first..last, back to
 * it; keep_empty: see run_put in heap.c; size: the run's block size. */
void hak_heap_run_put(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, void *first, void *last,
                      unsigned n, int keep_empty, size_t size);

/* heap_remote.c: inboxes (the format of what they hold is described there) */
/* Puts the blocks other threads sent to h back on its runs (those of
 * SuperSlabs that moved on go to their new owner); keep_empty: see run_put.
 * The caller holds h's lock. */
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
    hak_link_set(p, c->head);
    c->head = p;
    c->n++;
    sd->last = c;
}
void hak_send_add(struct hak_heap *h, struct hak_send *sd, void *p, uintptr_t slab, struct hak_heap *owner);
void hak_send_all(struct hak_heap *h, struct hak_send *sd);

/* heap_idle.c */
void hak_heap_decay(struct hak_heap *h);          /* on h's misses, under its lock */
/* 1 while h's slabs in runs and free dirty ones are no more than it had in
 * runs at its recent high: its free slabs wait for the next crest. */
int hak_heap_within_recent_high(const struct hak_heap *h);
/* What an abandoned heap (locked by the caller) holds for nobody goes:
 * its inbox is drained and, once it has waited `period`, its empty runs
 * and then its empty SuperSlabs are released. */
void hak_heap_scavenge_one(struct hak_heap *h, uint32_t now, uint32_t period);
void hak_heap_scavenge_abandoned(void);            /* before h takes a new SuperSlab */
struct hak_heap *hak_heap_abandoned_take_locked(int *busy);
void hak_heap_abandoned_unlock_return(struct hak_heap *h);

/* heap_hollow.c; the caller holds h's lock (pages of free blocks inside
 * runs in use go back: see there) */
/* After a block went back to s: queue s if it is mostly free now (3/4 of
 * its carved blocks). Only partly used runs of blocks of
 * HAK_HOLLOW_MIN_BLOCK bytes and up qualify. The cheap part of the test
 * is inline, since every block a flush returns passes here: big_heap's
 * 64-byte blocks paid a call each (189 -> 209 instructions an op), and
 * 700-byte blocks freed in a row 23 a block for a call that said no. */
#define HAK_HOLLOW_MIN_BLOCK 512u
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
/* On a refill: the whole queue, after a large drop. */
void hak_heap_hollow_batch(struct hak_heap *h);
/* malloc_trim: the whole queue now (nothing with the clock off); returns
 * how many runs went hollow. */
unsigned hak_heap_hollow_all(struct hak_heap *h);
/* At a decay tick: runs that waited in the queue a whole period. */
void hak_heap_hollow_tick(struct hak_heap *h, uint32_t now, uint32_t period);
/* Moves up to want of s's hollow blocks onto the bin; returns how many. */
unsigned hak_slab_take_hollow(struct hak_slab *s, struct hak_bin *bin, unsigned want);
/* s goes back to its SuperSlab: its bitmap is cleared. */
void hak_slab_hollow_reset(struct hak_slab *s);

/* heap_share.c; the caller holds h's lock */
unsigned hak_heap_borrow(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want);
int hak_heap_absorb_abandoned(struct hak_heap *h);

#endif
