/* A bin's refill from its heap: free blocks of the heap's runs first,
 * then of a larger class, then an idle heap's (borrowed), then new runs. */
#include "backend/heap_int.h"
#include "os/os.h"
#include "base/options.h"

/* Moves the first `want` blocks (or fewer) of run s's free list onto the
 * bin; s must have some. Returns how many. */
static unsigned take_free(struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    void *first = s->free, *last = first, *next = hak_list_get(first);
    unsigned got = 1;
    /* each link read once: a keyed one that fails is reported once */
    while (got < want && next != NULL) {
        last = next;
        got++;
        next = hak_list_get(last);
    }
    s->free = next;
    s->nfree -= got;
    hak_list_set(last, bin->head);
    bin->head = first;
    return got;
}

/* Whether an empty bin takes run s's whole free list even past its room:
 * a run of its own class in its thread's heap (not a larger class's, nor
 * an idle heap's it borrows from), a thread's bin (max: hak_heap_take_one's
 * holds one block), and at most a slab's worth of blocks (a tiny class's
 * run is one slab) and HAK_WHOLE_LIST_BINS times the bin's size: a bin
 * still small (slow start, front/front.h) is a thread's that uses the
 * class little, and blocks a bin holds keep their runs from emptying. Cutting
 * `want` blocks off a list means following want links first, one cold
 * block each and every load waiting on the last: a tree freed in
 * post-order leaves its runs' lists in random address order, and its
 * next round's refills spent about a tenth of its time in that walk
 * (docs/PERFORMANCE.md, "Refill and carving"). Taken whole, each block
 * is first touched by the malloc that hands it out, as the program is
 * about to write it. The bin grows past its size for as long as it
 * holds them (hak_cache_refill_pop and hak_cache_flush_push, front/batch.c,
 * bring it back); the blocks were free and resident in the run, so no
 * new memory is touched. */
#define HAK_WHOLE_LIST_BINS 8u
static int takes_whole_list(const struct hak_slab *s, const struct hak_bin *bin, int own) {
    return s->nfree <= bin->room ||
           (own && s->nfree <= HAK_WHOLE_LIST_BINS * bin->max &&
            (uint64_t)s->nfree * s->block_size <= HAK_SLAB_SIZE);
}

/* Moves free blocks of run s onto the bin: its whole free list as it is
 * when the bin is empty and may take it (O(1), and no cold block is
 * touched before the program asks for it: takes_whole_list), else up to
 * want of them. own: s is a run of the bin's class in its thread's heap. */
static unsigned take_blocks(struct hak_slab *s, struct hak_bin *bin, unsigned want, int own) {
    unsigned got;
    /* a link that failed its check (base/link_guard.h) ended the list
     * early: the blocks past it are lost, not handed out */
    if (HAK_UNLIKELY(s->nfree && !s->free)) s->nfree = 0;
    if (!s->nfree) {
        got = hak_slab_take_hollow(s, bin, want);   /* their pages fault back in */
    } else if (!bin->head && takes_whole_list(s, bin, own)) {
        got = s->nfree;
        if (got > bin->room) {   /* the bin grows to hold them */
            bin->max += got - bin->room;
            bin->room = got;
        }
        bin->head = s->free;
        s->free = NULL;
        s->nfree = 0;
    } else {
        got = take_free(s, bin, want);
    }
    s->used += got;
    return got;
}

/* take_blocks from a partly used run of h; a run left with nothing to
 * give leaves the partial list. */
static unsigned take_partial(struct hak_heap *h, struct hak_slab *s, struct hak_bin *bin, unsigned want, int own) {
    hak_heap_hollow_dequeue(h, s);   /* in use again */
    if (s->kept) h->empty_slabs -= h->empty_slabs < s->nslabs ? h->empty_slabs : s->nslabs;
    s->kept = 0;
    s->seen_empty = 0;   /* used since the last tick */
    unsigned got = take_blocks(s, bin, want, own);
    if (!s->nfree && !s->nhollow && s->carved == s->capacity) {
        hak_heap_partial_unlink(h, s);
        s->state = HAK_SLAB_FULL;
    } else if (!s->nfree && s->nhollow) {
        hak_heap_partial_demote(h, s);
    }
    return got;
}

/* Free blocks of h's runs of class cls, the current run's first. own: h
 * is the bin's thread's heap (a borrower takes no more than want). */
static unsigned take_own(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want, int own) {
    struct hak_slab *s = h->current[cls], *hollow = NULL;
    if (s && s->nfree) return take_blocks(s, bin, want, own);
    /* resident free blocks first (HAK_PARTIAL_RESIDENT_SCAN, heap_int.h) */
    unsigned n = 0;
    for (struct hak_slab *p = h->partial[cls]; p; p = p->next) {
        if (p->nfree) return take_partial(h, p, bin, want, own);
        if (p->nhollow && !hollow) hollow = p;
        if (++n == HAK_PARTIAL_RESIDENT_SCAN && hollow) break;
    }
    if (s && s->nhollow) return take_blocks(s, bin, want, own);
    return hollow ? take_partial(h, hollow, bin, want, own) : 0;
}

/* Before a new run is made for cls (new pages to fault in), free blocks of
 * a larger class that are already resident are used instead: a block
 * handed out this way is freed to its own class (its slab's tag says
 * which); only the double-free check needs to know (it looks in the bins
 * of the classes a block can stand in for: safety/badfree.c). Without it, a class whose count
 * of live blocks drifts up (random sizes) or a phase that moves to larger
 * sizes faults in new runs while its neighbours' runs sit half empty.
 * Current runs lend too: a class with fewer live blocks than a run holds
 * has no partial run (docs/PERFORMANCE.md, "Refill and carving"). */
#define HAK_LEND_MIN 4u   /* free blocks a current run needs to lend half of them */
static unsigned refill_from_larger(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    for (unsigned big = cls + 1; big < HAK_NCLASS && hak_class_size[big] <= 2 * hak_class_size[cls]; big++) {
        if (!hak_class_stands_in(big, cls)) continue;
        struct hak_slab *s = h->partial[big];
        if (s && (s->nfree || s->nhollow)) return take_partial(h, s, bin, want, 0);
        /* a class with fewer live blocks than a run holds has its free
         * ones in its current run: half of them, so that it does not
         * carve for itself at once what it lent */
        s = h->current[big];
        if (s && s->nfree >= HAK_LEND_MIN) {
            unsigned half = s->nfree / 2;
            unsigned got = take_free(s, bin, want < half ? want : half);
            s->used += got;
            return got;
        }
    }
    return 0;
}

/* An idle heap's free blocks (below). */
static unsigned borrow(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want);

/* Accounts for got blocks just moved onto the bin. */
static unsigned refilled(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned got) {
    bin->room -= got < bin->room ? got : bin->room;
    size_t took = (size_t)got * hak_class_size[cls];
    h->dropped_bytes = h->dropped_bytes > took ? h->dropped_bytes - took : 0;
    h->st.refills++;
    h->st.refilled_blocks += got;
    h->st.class_refills[cls]++;
    return got;
}

/* Blocks one refill may carve from run s's untouched part: about a page's
 * worth (at least one block). Carving writes a link into every block, so
 * each carved block is resident from then on even if the program never
 * asks for it; a bin's full refill batch (up to 16 KiB a class) left
 * carved would make every class of a random mix resident up to its
 * highest live count plus that batch. Carving happens only when no free
 * block is at hand, so a steady workload rarely pays the extra misses; a
 * growing one pays one miss per page of new blocks (docs/PERFORMANCE.md,
 * "Refill and carving").
 * A page holds one or two mid blocks, so a program that only grows a mid
 * class (a page cache, a tree of buffers) would take a miss for nearly
 * every block: after HAK_CARVE_STREAK refills of the class in a row that
 * all had to carve, a refill may carve up to HAK_CARVE_GROWN_PAGES pages.
 * What that leaves carved beyond the program's need is at most those
 * pages, and only in a class that keeps growing.
 * A tiny class carves ahead only when the heap's last HAK_CARVE_STREAK
 * refills all had to carve and were all of that class (a loop that
 * builds one kind of object). A random mix grows its classes together,
 * each refill of another class than the last, and keeps the one-page
 * carve: carving ahead for every class at its start left blocks in every
 * class that it never used. */
#define HAK_CARVE_STREAK 4u
#define HAK_CARVE_GROWN_PAGES 8u
static inline int grows_alone(const struct hak_heap *h, unsigned cls) {
    return h->carve_alone_cls == cls && h->carve_alone >= HAK_CARVE_STREAK;
}
static inline unsigned carve_cap(const struct hak_heap *h, const struct hak_slab *s, unsigned cls) {
    int grown = !hak_class_is_tiny(cls) ? h->carve_streak[cls] >= HAK_CARVE_STREAK : grows_alone(h, cls);
    unsigned pages = grown ? HAK_CARVE_GROWN_PAGES : 1;
    unsigned n = pages * HAK_PAGE_SIZE / s->block_size;
    return n ? n : 1;
}

/* Blocks from block k of run s on that start in the page of block k - 1
 * (k > 0): what a carve that stops at k must carve as well, so that the
 * page it ends in has every block starting there carved and gets its tag
 * in the tag window (backend/chunk_map.h, hak_slab_tagged_pages). At most
 * a page's worth less one block. */
static unsigned page_rest(const struct hak_slab *s, uint32_t k) {
    if (k >= s->capacity || (s->per_slab && k % s->per_slab == 0)) return 0;   /* next slab: a new page */
    uintptr_t end = ((uintptr_t)hak_slab_block(s, k - 1) | (HAK_PAGE_SIZE - 1)) + 1;
    uintptr_t next = (uintptr_t)hak_slab_block(s, k);
    if (next >= end) return 0;
    uint32_t n = (uint32_t)((end - next + s->block_size - 1) / s->block_size);
    uint32_t left = s->per_slab ? s->per_slab - k % s->per_slab : s->capacity - k;
    return n < left ? n : left;
}

/* Carves up to want blocks from run s's untouched part onto the bin, in
 * ascending address order, then tags the pages carved whole. A thread's
 * bin also takes the rest of the blocks starting in the last page reached
 * (page_rest), growing past its size if it has to (by less than a page's
 * worth of blocks; its next frees flush), so that the page gets its tag
 * and the frees of its blocks take the hit path. hak_heap_take_one's bin
 * (max 0) takes one block: its page stays untagged until a later carve
 * finishes it, and frees of its carved blocks are checked on the slow
 * path meanwhile (the blocks on the run's free list instead would be lent
 * to smaller classes, refill_from_larger). Each block's address is the
 * last one's plus the block size, or the next slab's start once a slab is
 * full (runs and slabs start on 64 KiB boundaries): one division a carve,
 * not one a block (a growing class of 64-byte blocks spent 11
 * instructions a block and a divide's latency in hak_slab_block). */
static unsigned carve(struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    unsigned room = s->capacity - s->carved;
    unsigned got = want < room ? want : room;
    if (!got) return 0;
    if (bin->max) {
        got += page_rest(s, s->carved + got);
        if (got > bin->room) {
            bin->max += got - bin->room;
            bin->room = got;
        }
    }
    unsigned tagged = hak_slab_tagged_pages(s);
    uint32_t bs = s->block_size;
    char *b = hak_slab_block(s, s->carved);
    /* blocks from b to the end of its slab (runs of one slab-spanning
     * class have no slab ends inside) */
    unsigned in_slab = s->per_slab ? s->per_slab - s->carved % s->per_slab : got;
    char *first = b;
    for (unsigned left = got;;) {
        unsigned stretch = left < in_slab ? left : in_slab;
        for (unsigned k = 1; k < stretch; k++, b += bs) {
            hak_track_noaccess(b, bs);
            hak_list_set(b, b + bs);
        }
        hak_track_noaccess(b, bs);
        left -= stretch;
        if (!left) break;
        char *next = (char *)(((uintptr_t)b & ~(uintptr_t)(HAK_SLAB_SIZE - 1)) + HAK_SLAB_SIZE);
        hak_list_set(b, next);
        b = next;
        in_slab = s->per_slab;
    }
    hak_list_set(b, bin->head);
    bin->head = first;
    __atomic_store_n(&s->carved, s->carved + got, __ATOMIC_RELAXED);
    hak_slab_window_tag(s, tagged, hak_slab_tagged_pages(s));
    return got;
}

/* A new run took the heap's slabs in runs HAK_GROW_STEP past their lowest
 * since the last step: a step of growth, at which its thread's bins that
 * nobody popped since the previous one go back (front/batch.c,
 * hak_cache_trim_idle), their blocks to serve the growth. A step of one
 * run flushes bins that loops use (their runs empty and are made again),
 * one of a SuperSlab comes late for a phase change (docs/PERFORMANCE.md,
 * "Thread caches"). */
#define HAK_GROW_STEP 16u   /* slabs: 1 MiB */
static void count_growth(struct hak_heap *h) {
    uint32_t used = h->ss_count * HAK_SLABS_PER_SS - h->free_slabs;
    if (used < h->grow_low) {
        h->grow_low = used;
    } else if (used >= h->grow_low + HAK_GROW_STEP) {
        h->grow_low = used;
        h->grow_steps++;
    }
}

/* refilled, for blocks that were free: their class does not only grow. */
static unsigned refilled_free(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned got) {
    h->carve_streak[cls] = 0;
    h->carve_alone = 0;
    return refilled(h, cls, bin, got);
}

/* Blocks come, in this order, from what is already resident: free blocks
 * of the class's runs, of a larger class's (refill_from_larger), of an
 * idle heap's (borrow); then, if may_grow, from the untouched part of the
 * class's current run; then from a run that still has one; then from a
 * new run. */
static unsigned refill(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want, int may_grow) {
    hak_heap_decay(h);
    if (atomic_load_explicit(&h->inbox, memory_order_relaxed))
        hak_heap_drain_inbox(h, 0);
    unsigned got;
    for (;;) {
        if ((got = take_own(h, cls, bin, want, 1)) != 0) return refilled_free(h, cls, bin, got);
        if ((got = refill_from_larger(h, cls, bin, want)) != 0) {
            h->st.borrowed_blocks += got;
            return refilled_free(h, cls, bin, got);
        }
        if ((got = borrow(h, cls, bin, want)) != 0) return refilled_free(h, cls, bin, got);
        if (!may_grow) return 0;
        struct hak_slab *s = h->current[cls];
        if (!s || s->carved == s->capacity) {
            if (s) s->state = HAK_SLAB_FULL;   /* exhausted: off every list until a block returns */
            /* no partial run has free blocks now, so each has untouched ones */
            if ((s = h->partial[cls]) != NULL) {
                hak_heap_partial_unlink(h, s);
                if (s->carved == s->capacity) {   /* cannot happen; never carve nothing */
                    s->state = HAK_SLAB_FULL;
                    continue;
                }
                hak_heap_hollow_for_growth(h, (size_t)s->nslabs << HAK_SLAB_SHIFT);
            } else if (!(s = hak_heap_run_in_own(h, cls))) {
                h->current[cls] = NULL;
                if (__atomic_load_n(&hak_heaps.abandoned, __ATOMIC_RELAXED) && hak_heap_absorb_abandoned(h))
                    continue;
                /* before taking more memory, collect what exited threads'
                 * heaps were sent back (cheap when there is none: one
                 * relaxed load) */
                if (__atomic_load_n(&hak_heaps.abandoned, __ATOMIC_RELAXED))
                    hak_heap_scavenge_abandoned();
                if (!(s = hak_heap_run_in_new_ss(h, cls))) return 0;
            }
            s->state = HAK_SLAB_CURRENT;
            h->current[cls] = s;
            count_growth(h);
        }
        unsigned cap = carve_cap(h, s, cls);
        uint32_t was = s->carved;
        got = carve(s, bin, want < cap ? want : cap);
        s->used += got;
        h->st.class_carved[cls] += s->carved - was;
        if (h->carve_streak[cls] < UINT8_MAX) h->carve_streak[cls]++;
        if (h->carve_alone_cls != cls) h->carve_alone = 0;
        h->carve_alone_cls = (uint8_t)cls;
        if (h->carve_alone < UINT8_MAX) h->carve_alone++;
        return refilled(h, cls, bin, got);
    }
}

unsigned hak_heap_refill(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want, int may_grow) {
    hak_spin_lock(&h->lock);
    unsigned got = refill(h, cls, bin, want, may_grow);
    hak_spin_unlock(&h->lock);
    return got;
}

void *hak_heap_take_one(struct hak_heap *h, unsigned cls) {
    struct hak_bin one = { 0 };
    return hak_heap_refill(h, cls, &one, 1, 1) ? one.head : NULL;
}

/* Before h carves blocks it never had (new pages), it borrows free ones of
 * class cls from a heap whose owner has had no miss for a decay period and
 * to which other threads have been giving blocks back (its inbox, or its
 * lendable hint): a thread that set memory up and went on to something
 * else (a main thread waiting for its workers) never drains its inbox, and
 * its runs would fill with free blocks nobody may use while the threads
 * freeing them carve new ones. A busy heap lends too, blocks of
 * HAK_BORROW_BUSY_MIN bytes and up: when threads pass blocks around (a
 * ring, a pipeline), a heap whose thread lives on what others free into
 * its bins rarely refills, and the blocks sent back to it piled up in its
 * runs (1-2 MiB over thread_ring's 8 heaps) while the other threads carved
 * new pages. Smaller blocks of a busy heap are left alone: beside its
 * thread's own blocks, a borrowed one shares their cache lines, and two
 * threads writing them fight over the lines (false_sharing at a third of
 * its speed). Nor does an exited thread's heap lend before it is idle:
 * its runs wait for the thread that adopts it, and blocks borrowed from
 * it would come back to an inbox nobody drains (churn_threads' peak rose
 * 0.4 MiB). Borrowing happens only where a carve would, so a heap whose
 * runs have free blocks of the class never borrows (docs/PERFORMANCE.md,
 * "Remote frees and idle heaps").
 * The blocks stay that heap's: they go back to it when freed,
 * like any block a thread frees that another one allocated. Try-locks
 * only, and at most HAK_BORROW_SCAN heaps a call. */
#define HAK_BORROW_SCAN 32u
#define HAK_BORROW_BUSY_MIN 128u   /* two cache lines */
static unsigned borrow(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    uint32_t idle = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    if (!idle) return 0;   /* no clock, no idle heap */
    struct hak_heap *head = __atomic_load_n(&hak_heaps.all, __ATOMIC_ACQUIRE);
    if (head == h && !h->next_all) return 0;   /* the only heap */
    struct hak_heap *v = h->borrow_next ? h->borrow_next : head;
    uint64_t bit = (uint64_t)1 << (cls % 64);
    uint32_t now = hak_os_clock_ms();
    int busy_too = hak_class_size[cls] >= HAK_BORROW_BUSY_MIN;
    unsigned got = 0;
    /* the scan resumes where the last one stopped, so that every heap is
     * looked at in turn however many there are; it stops after one lap
     * (with one heap, 32 turns around it cost every carve ~400
     * instructions) */
    struct hak_heap *start = v;
    for (unsigned seen = 0; v && seen < HAK_BORROW_SCAN && !got; seen++) {
        struct hak_heap *cur = v;
        v = v->next_all ? v->next_all : head;
        if (v == start) v = NULL;   /* cur is the last one this lap */
        _Atomic uint64_t *word = &cur->lendable[cls / 64];
        if (cur == h || (!(atomic_load_explicit(word, memory_order_relaxed) & bit) &&
                         !atomic_load_explicit(&cur->inbox, memory_order_relaxed)) ||
            ((!busy_too || atomic_load_explicit(&cur->orphaned, memory_order_relaxed)) &&
             (int32_t)(now - atomic_load_explicit(&cur->active_ms, memory_order_relaxed)) < (int32_t)idle) ||
            !hak_spin_trylock(&cur->lock))
            continue;
        hak_heap_drain_inbox(cur, 1);
        got = take_own(cur, cls, bin, want, 0);
        if (!got) atomic_fetch_and_explicit(word, ~bit, memory_order_relaxed);
        hak_spin_unlock(&cur->lock);
    }
    h->borrow_next = v;
    h->st.borrowed_remote += got;
    return got;
}
