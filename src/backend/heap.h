/* A heap: the SuperSlabs one thread owns, with per-class runs, and an inbox
 * for blocks other threads free, which they push with one CAS. Its runs and
 * lists are changed only under its spin lock: by the owner on its misses,
 * or by another thread borrowing from it while it is idle or draining it
 * after its thread exited (backend/heap_orphans.c, heap_abandon.c). A heap
 * outlives its thread: when the thread exits the heap is abandoned with its
 * runs, then adopted whole by the next thread that starts, so blocks still
 * alive elsewhere stay valid and their memory is reused. */
#ifndef HAK_HEAP_H
#define HAK_HEAP_H

#include "backend/superslab.h"
#include "base/tls.h"

struct hak_heap_stats {
    uint64_t refills, refilled_blocks;
    uint64_t flushes, flushed_blocks;
    uint64_t remote_pushes, remote_blocks, inbox_drains, inbox_blocks;
    uint64_t runs_made, runs_freed, ss_acquired, ss_released;
    uint64_t decay_ticks, decay_purges, borrowed_blocks, borrowed_remote;
    uint64_t standin_blocks;          /* mid misses served from a bin of a larger class (front/batch.c) */
    uint64_t dirty_purges;            /* purge calls for free slabs past the bound on dirty_free */
    uint64_t idle_bins, idle_bin_blocks;   /* bins emptied untouched since a tick or growth */
    uint64_t hollowed_runs, hollow_calls, hollowed_blocks;   /* heap_hollow.c */
    uint64_t class_refills[HAK_NCLASS];
    uint64_t class_carved[HAK_NCLASS];  /* blocks carved from untouched run space */
};

#define HAK_PURGE_SS 8u   /* SuperSlabs in a heap's purge batch */

struct hak_heap {
    _Atomic(void *) inbox;            /* remote frees, any thread pushes */
    /* 1 while no thread owns the heap (its thread exited, nobody adopted
     * it yet): blocks pushed to its inbox then wait for a scavenger, so a
     * pusher that sees it notes that it fed an orphan (fed_orphans) */
    _Atomic uint32_t orphaned;
    char pad_inbox[52];               /* keep it off the owner's hot line */
    /* Held by whoever works on the heap's runs and lists: its owner on
     * every miss (never on a hit), another thread that borrows free blocks
     * from it, or the thread that drains an abandoned heap. A thread that
     * holds its own heap's lock only ever try-locks another heap's. */
    hak_spinlock_t lock;
    /* Classes whose runs got free blocks back from other threads (its
     * inbox) since a borrower last found none there: a hint for borrow()
     * in backend/heap_refill.c, read without the lock. */
    _Atomic uint64_t lendable[(HAK_NCLASS + 63) / 64];
    struct hak_slab *current[HAK_NCLASS];
    struct hak_slab *partial[HAK_NCLASS];
    uint8_t run_level[HAK_NCLASS];    /* size of the next run of each class (hak_ss_run_slabs) */
    /* Refills of each class in a row that had to carve (no free block
     * anywhere): a class that only grows (see carve_cap in heap_refill.c) */
    uint8_t carve_streak[HAK_NCLASS];
    /* The class of the heap's last refills if they all had to carve and
     * were all of that one class, and how many in a row (carve_cap) */
    uint8_t carve_alone_cls, carve_alone;
    struct hak_superslab *ss_list;    /* every SuperSlab this heap owns */
    /* Those with free slabs, by the longest stretch of free slabs they
     * have: room[b] holds those whose stretch is 2^b to 2^(b+1)-1 slabs */
    struct hak_superslab *room[HAK_ROOM_BUCKETS];
    unsigned ss_count;
    unsigned free_slabs;              /* free slabs of its SuperSlabs, all told */
    /* Free slabs of its SuperSlabs whose pages some run touched since they
     * were last purged: resident memory no block uses (hak_heap_dirty_*) */
    uint32_t dirty_free;
    /* Slabs of the runs with no block out that its flushes and drains
     * kept with their class (hak_run_put in heap_int.h; marked kept in the run):
     * counted as they join and as blocks are taken from them again,
     * recounted at each decay tick (adoption may move runs in between) */
    uint32_t empty_slabs;
    /* SuperSlabs with free slabs past the bound on dirty_free, to purge
     * in one batch (heap_runs.c, purge_later), and how many slabs */
    struct hak_superslab *purge_ss[HAK_PURGE_SS];
    unsigned purge_n, purge_slabs;
    uint32_t decay_at;                /* hak_os_clock_ms() of the next decay tick */
    /* Partly used runs mostly free, oldest first, whose free pages may go
     * back (heap_hollow.c), and their free bytes when they joined */
    struct hak_slab *hollow_queue, *hollow_queue_tail;
    size_t hollow_queued_bytes;
    /* Bytes of blocks its runs got back, less those its bins took, since
     * it last held more (never below 0): how far it fell from its peak */
    size_t dropped_bytes;
    /* Most slabs in runs at a tick of this decay epoch and of the last one,
     * and when this epoch began (heap_decay.c, keep_for_recent_high) */
    uint32_t high_now, high_last, high_since;
    uint32_t abandoned_ms;            /* when its thread exited (abandoned heaps only) */
    /* Abandoned and scavenged once it had waited a decay period: its kept
     * runs are gone, and it waits behind the heaps still warm (heap_orphans.c) */
    uint8_t scavenged;
    _Atomic uint32_t active_ms;       /* its owner's last miss (hak_os_clock_ms; borrow() reads it) */
    struct hak_heap *next_all;        /* registry of every heap (stats) */
    struct hak_heap *borrow_next;     /* where its next borrow scan starts (owner only) */
    struct hak_heap *idle_next;       /* where its tick next looks for an idle heap (owner only) */
    struct hak_heap *next_abandoned;
    /* Its slabs in runs at its last step of growth or since, at their
     * lowest, and its steps of growth (heap_refill.c, count_growth) */
    uint32_t grow_low, grow_steps;
    /* Its thread's bins as the last look at them found them (front/batch.c,
     * hak_cache_trim_idle; owner only): head of each bin, and the tick
     * count and steps of growth then */
    void *bin_mark[HAK_NBINS];
    uint64_t bins_seen_tick;
    uint32_t bins_seen_growth;
    /* Its thread pushed blocks to an orphaned heap's inbox since it last
     * scavenged the abandoned heaps (owner only): it scavenges them at its
     * next tick and when it exits, so that those blocks do not wait for a
     * thread that needs a new SuperSlab (maybe none ever does). */
    uint8_t fed_orphans;
    struct hak_heap_stats st;
};

struct hak_heap *hak_heap_acquire(void);   /* adopt an abandoned heap or make one */
void hak_heap_abandon(struct hak_heap *h); /* after its thread's caches were flushed */
/* Heaps a live thread owns now (acquired and not abandoned): how many
 * threads share what caches may hold (pool/tls.c). Read without a lock. */
unsigned hak_heaps_owned(void);
/* fork() child: only the forking thread lives on (has_heap: it owns one) */
void hak_heaps_owned_fork_child(int has_heap);

/* Moves up to want blocks of class cls onto the bin. Returns how many
 * (0: out of memory; or, when !may_grow, no free block was resident and
 * the heap would have had to carve new ones). */
unsigned hak_heap_refill(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want, int may_grow);
/* One block of class cls straight from h's runs, not through a bin (NULL:
 * out of memory). */
void *hak_heap_take_one(struct hak_heap *h, unsigned cls);
/* Returns the first n blocks of the bin to their runs (own ones directly,
 * other heaps' through their inboxes, one CAS per batch). A run of h left
 * with no block out goes back to its SuperSlab, unless keep_empty (a
 * thread exiting: its heap keeps its runs for the thread that adopts it,
 * see hak_heap_abandon). */
void hak_heap_flush(struct hak_heap *h, struct hak_bin *bin, unsigned n, int keep_empty);
/* 1 when empty runs of mid classes stay with their class as tiny ones do
 * (heap_int.h, hak_keep_empty_run): set at init when no bins keep those
 * classes' blocks (the hardened box; HAKMEM_POOL=none gives them back at
 * once, which tests/test-sizes.c relies on), whose runs, a few blocks
 * each, would otherwise empty at nearly every flush and be made anew at
 * the next refill (1 M pairs of mid_large_mt on one thread: 13,697 runs
 * made against the default's 187, peak RSS 1.75 times the default's). */
HAK_DATA int hak_heap_keep_mid_runs;
/* Sends one block (already freed for memcheck; the link puts the free mark
 * on it) to its owner's inbox: the free of a thread whose heap is gone
 * (see free_small in api/api.c). */
void hak_heap_free_remote(void *p);
/* 1 if p (a block of one of h's runs, or of another heap's) is on h's
 * lists: its run's free list (when h owns the run) or h's inbox. Slow. */
int hak_heap_holds_free(struct hak_heap *h, const void *p);

/* Memory pressure: h's runs with no block out (current ones too) and its
 * SuperSlabs left with no run go back to the pool. h is the caller's own
 * heap. Returns the number of SuperSlabs released. */
size_t hak_heap_release_unused(struct hak_heap *h);
/* Memory pressure and malloc_trim: every other heap's SuperSlabs with no
 * run go back to the pool (self may be NULL), after the heaps of exited
 * threads took back what waits in their inboxes and let go of the runs
 * they kept for an adopter, and the others of the empty runs they kept
 * for their classes. Returns how many. */
size_t hak_heap_release_empty_elsewhere(struct hak_heap *self);
/* malloc_trim: the pages of every free slab of every heap go back now,
 * whatever the clock says (other heaps' only when their lock is free), and
 * those of the free blocks of self's mostly free runs (hollow runs, see
 * heap_hollow.c; self may be NULL). Returns how many slabs and runs did. */
size_t hak_heap_purge_all_free(struct hak_heap *self);

/* Bytes of h's runs not on a run free list: in use by the program or
 * waiting in thread caches. A snapshot for stats. */
size_t hak_heap_bytes_out(struct hak_heap *h);
/* h's counters and what it holds now, taken under its lock (stats):
 * orphaned is 1 while its thread has exited and no thread adopted it. */
struct hak_heap_usage { size_t blocks_out, bytes_out; unsigned superslabs; int orphaned; };
void hak_heap_snapshot(struct hak_heap *h, struct hak_heap_stats *st, struct hak_heap_usage *u);

/* Visits every heap ever made (stats). */
void hak_heap_foreach(void (*fn)(struct hak_heap *, void *), void *arg);
void hak_heap_fork_prepare(void);
void hak_heap_fork_parent(void);
void hak_heap_fork_child(void);

#endif
