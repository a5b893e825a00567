#include "backend/heap_int.h"
#include "os/os.h"
#include "base/options.h"
#include "base/track.h"

#include <string.h>

struct hak_heap_registry hak_heaps = { .lock = HAK_SPINLOCK_INIT };

/* Runs left with no block out that a heap keeps with their class, in
 * slabs, while its clock runs (HAKMEM_DECAY_MS; the tick releases those
 * its recent high does not cover: heap_idle.c). A program whose queue or
 * cache of blocks drains and fills again, producer_consumer's ring among
 * them, empties whole runs of its mid-sized classes at every trough: given
 * back to the SuperSlab, each slab was taken again by whichever class
 * needed a run first, carved anew by a class of another block size, and
 * in the end every slab its classes ever passed through was wholly
 * resident (12-13 of them for 529-1,040 B blocks, against 6-7 of live
 * blocks). Kept, a class finds its own carved blocks at the next crest:
 * producer_consumer's peak 2,712 -> 2,604 KB (medians of 11 interleaved
 * runs; glibc 2,420), and its 1,040-byte class carved 237 blocks in a run
 * instead of 7,263. A bound, since a class kept to itself is memory no
 * other class may use: with none, realloc_grow's peak (vectors that
 * double, so classes that empty for good) went 49.6 -> 70.5 MB and
 * fragment's final RSS 158 -> 201 MB; with 8 slabs, 49.5 -> 50.2 and
 * 158.1 -> 158.4 (16: about twice that; docs/PERFORMANCE.md, session
 * 26). Tiny classes only: a mid class's run holds a few large blocks,
 * which Pool TLS bins keep already, and a program that frees such blocks
 * expects their slabs to serve any size. */
#define HAK_EMPTY_KEEP_SLABS 8u

static int keep_empty_run(const struct hak_heap *h, const struct hak_slab *s) {
    return hak_class_is_tiny(s->cls) && h->empty_slabs + s->nslabs <= HAK_EMPTY_KEEP_SLABS &&
           hak_opt(HAK_OPT_DECAY_MS);
}

/* Gives n blocks of run s, chained from first to last, back to it; the
 * caller holds the run's heap's lock. A run left with no block out stays
 * with its class when keep_empty_run says so; else it goes back to its
 * SuperSlab, unless keep_empty: a borrower draining another heap's inbox
 * keeps the runs whole, so that their blocks can still be lent
 * (hak_heap_borrow()); freed slabs of a heap whose thread does not
 * allocate would be of no use to anyone. Returns the run when it stays
 * partly used or empty with its class (the caller then sees whether it
 * should join the hollow queue: done there, where h is at hand anyway,
 * this function saves registers), else NULL.
 * The blocks are block starts of s: every block that reaches a bin, an
 * inbox or this function was checked as one when it was freed (the hit
 * path's class check, hak_free_miss's run check, or the safety box's),
 * so no check is repeated here, where every flushed block passes. */
static struct hak_slab *run_put(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, void *first,
                                void *last, unsigned n, int keep_empty) {
    hak_link_set(last, s->free);
    s->free = first;
    s->nfree += n;
    s->used -= n;
    if (s->state == HAK_SLAB_CURRENT) return NULL;
    if (s->used == 0 && !keep_empty) {
        if (keep_empty_run(h, s)) {
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

/* run_put, then what the heap's hollow runs need to know (heap_hollow.c). */
static inline void run_put_noting(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, void *first,
                                  void *last, unsigned n, int keep_empty, size_t size) {
    struct hak_slab *r = run_put(h, ss, s, first, last, n, keep_empty);
    h->dropped_bytes += (size_t)n * size;
    if (r) hak_heap_hollow_consider(h, r);
}

void hak_heap_run_put(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, void *first, void *last,
                      unsigned n, int keep_empty, size_t size) {
    run_put_noting(h, ss, s, first, last, n, keep_empty, size);
}

/* ---- refill / flush ----------------------------------------------------- */

/* Moves the first `want` blocks (or fewer) of run s's free list onto the
 * bin; s must have some. Returns how many. */
static unsigned take_free(struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    void *first = s->free, *last = first, *next;
    unsigned got = 1;
    while (got < want && (next = hak_link_get(last)) != NULL) { last = next; got++; }
    s->free = hak_link_get(last);
    s->nfree -= got;
    hak_link_set(last, bin->head);
    bin->head = first;
    return got;
}

/* Moves free blocks of run s onto the bin: its whole free list as it is
 * when the bin is empty and has room for it (O(1), and no cold block is
 * touched before the program asks for it), else up to want of them. */
static unsigned take_blocks(struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    unsigned got;
    if (!s->nfree) {
        got = hak_slab_take_hollow(s, bin, want);   /* their pages fault back in */
    } else if (!bin->head && s->nfree <= bin->room) {
        got = s->nfree;
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
static unsigned take_partial(struct hak_heap *h, struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    hak_heap_hollow_dequeue(h, s);   /* in use again */
    if (s->kept) h->empty_slabs -= h->empty_slabs < s->nslabs ? h->empty_slabs : s->nslabs;
    s->kept = 0;
    s->seen_empty = 0;   /* used since the last tick */
    unsigned got = take_blocks(s, bin, want);
    if (!s->nfree && !s->nhollow && s->carved == s->capacity) {
        hak_heap_partial_unlink(h, s);
        s->state = HAK_SLAB_FULL;
    }
    return got;
}

/* Free blocks of h's runs of class cls, the current run's first. */
unsigned hak_heap_take_own(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    struct hak_slab *s = h->current[cls];
    if (s && (s->nfree || s->nhollow)) return take_blocks(s, bin, want);
    for (s = h->partial[cls]; s; s = s->next)
        if (s->nfree || s->nhollow) return take_partial(h, s, bin, want);
    return 0;
}

/* Before a new run is made for cls (new pages to fault in), free blocks of
 * a larger class that are already resident are used instead: a block
 * handed out this way is freed to its own class (its slab's tag says
 * which); only the double-free check needs to know (it looks in the bins
 * of the classes a block can stand in for: safety/badfree.c). Without it, a class whose count
 * of live blocks drifts up (random sizes) or a phase that moves to larger
 * sizes faults in new runs while its neighbours' runs sit half empty:
 * random_mixed's peak RSS 8.8 -> 7.7 MiB, realloc_grow's 79 -> 63 MiB
 * (docs/PERFORMANCE.md). Current runs lend too: producer_consumer's
 * 3.2 -> 2.9 MiB (its 64 classes each had one run, none partial). */
#define HAK_LEND_MIN 4u   /* free blocks a current run needs to lend half of them */
static unsigned refill_from_larger(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    for (unsigned big = cls + 1; big < HAK_NCLASS && hak_class_size[big] <= 2 * hak_class_size[cls]; big++) {
        if (!hak_class_stands_in(big, cls)) continue;
        struct hak_slab *s = h->partial[big];
        if (s && (s->nfree || s->nhollow)) return take_partial(h, s, bin, want);
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
 * growing one pays one miss per page of new blocks.
 * random_mixed peak RSS 7.4 -> 7.2 MiB at +0.05% instructions (callgrind,
 * docs/PERFORMANCE.md).
 * A page holds one or two mid blocks, so a program that only grows a mid
 * class (a page cache, a tree of buffers) would take a miss for nearly
 * every block: after HAK_CARVE_STREAK refills of the class in a row that
 * all had to carve, a refill may carve up to HAK_CARVE_GROWN_PAGES pages.
 * What that leaves carved beyond the program's need is at most those
 * pages, and only in a class that keeps growing (session 14).
 * A tiny class carves ahead only when the heap's last HAK_CARVE_STREAK
 * refills all had to carve and were all of that class (a loop that
 * builds one kind of object: 700-byte blocks 201 -> 132 instructions a
 * malloc+free). A random mix grows its classes together, each refill of
 * another class than the last, and keeps the one-page carve: carving
 * ahead for every class at its start left blocks in every class that it
 * never used (random_mixed's peak 6.6 -> 6.7 MiB, session 15). */
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

/* Carves up to want blocks from run s's untouched part onto the bin, in
 * ascending address order. Each block's address is the last one's plus
 * the block size, or the next slab's start once a slab is full (runs and
 * slabs start on 64 KiB boundaries): one division a carve, not one a block
 * (a growing class of 64-byte blocks spent 11 instructions a block and a
 * divide's latency in hak_slab_block). */
static unsigned carve(struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    unsigned room = s->capacity - s->carved;
    unsigned got = want < room ? want : room;
    if (!got) return 0;
    uint32_t bs = s->block_size;
    char *b = hak_slab_block(s, s->carved);
    /* blocks from b to the end of its slab (runs of one slab-spanning
     * class have no slab ends inside) */
    unsigned in_slab = s->per_slab ? s->per_slab - s->carved % s->per_slab : got;
    s->carved += got;
    char *first = b;
    for (unsigned left = got;;) {
        unsigned stretch = left < in_slab ? left : in_slab;
        for (unsigned k = 1; k < stretch; k++, b += bs) {
            hak_track_noaccess(b, bs);
            hak_link_set(b, b + bs);
        }
        hak_track_noaccess(b, bs);
        left -= stretch;
        if (!left) break;
        char *next = (char *)(((uintptr_t)b & ~(uintptr_t)(HAK_SLAB_SIZE - 1)) + HAK_SLAB_SIZE);
        hak_link_set(b, next);
        b = next;
        in_slab = s->per_slab;
    }
    hak_link_set(b, bin->head);
    bin->head = first;
    return got;
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
    hak_heap_hollow_batch(h);
    unsigned got;
    for (;;) {
        if ((got = hak_heap_take_own(h, cls, bin, want)) != 0) return refilled_free(h, cls, bin, got);
        if ((got = refill_from_larger(h, cls, bin, want)) != 0) {
            h->st.borrowed_blocks += got;
            return refilled_free(h, cls, bin, got);
        }
        if ((got = hak_heap_borrow(h, cls, bin, want)) != 0) return refilled_free(h, cls, bin, got);
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
            } else if (!(s = hak_heap_run_in_own(h, cls))) {
                h->current[cls] = NULL;
                if (__atomic_load_n(&hak_heaps.abandoned, __ATOMIC_RELAXED) && hak_heap_absorb_abandoned(h))
                    continue;
                if (!(s = hak_heap_run_in_new_ss(h, cls))) return 0;
            }
            s->state = HAK_SLAB_CURRENT;
            h->current[cls] = s;
        }
        unsigned cap = carve_cap(h, s, cls);
        got = carve(s, bin, want < cap ? want : cap);
        s->used += got;
        h->st.class_carved[cls] += got;
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

/* A flush hands a bin's blocks back to their runs a slab at a time: the
 * blocks of one slab that come one after the other in the bin (a program
 * frees in the order it allocated, or a bin refilled from one run) are
 * chained first and given to their run at once, so each block costs a
 * link and a compare, and the run's counts and state are seen once a
 * slab (a flush of 64-byte blocks freed in a row: 82 -> 18 instructions
 * a block, callgrind, with the block-start check it no longer repeats).
 * Blocks of SuperSlabs other heaps own go to those heaps' inboxes, one
 * push an owner (hak_send_add, heap_remote.c). */
struct flush_run {
    uintptr_t slab;   /* address >> HAK_SLAB_SHIFT of the chained blocks; 0: none */
    struct hak_superslab *ss;
    void *first, *last;
    unsigned n;
};

/* Gives the chained stretch to its run. Always inlined: a call would take
 * run's address and keep it in memory through the whole loop (3-4
 * instructions more a flushed block). */
HAK_INLINE void flush_run_put(struct hak_heap *h, const struct flush_run *run, int keep_empty, size_t size) {
    if (run->n)
        run_put_noting(h, run->ss, hak_slab_of(run->ss, run->last), run->first, run->last, run->n, keep_empty, size);
}

static void flush(struct hak_heap *h, struct hak_bin *bin, unsigned n, int keep_empty) {
    struct hak_send send;
    send.used = send.evict = 0;
    send.last = NULL;
    struct flush_run run = { 0 };
    /* a bin's blocks are of its class's size, but for a larger class's
     * blocks a refill lent it: dropped_bytes is an estimate anyway */
    size_t size = bin->head ? hak_slab_of(hak_ss_of(bin->head), bin->head)->block_size : 0;
    hak_heap_decay(h);
    h->st.flushes++;
    h->st.flushed_blocks += n;
    for (unsigned i = 0; i < n && bin->head; i++) {
        void *p = bin->head;
        bin->head = hak_link_get(p);
        bin->room++;
        uintptr_t slab = (uintptr_t)p >> HAK_SLAB_SHIFT;
        if (slab == run.slab) {   /* h owns it: it owned the run's first, and holds its lock */
            hak_link_set(p, run.first);
            run.first = p;
            run.n++;
            continue;
        }
        if (send.last && slab == send.last->slab) {   /* the last remote block's slab */
            hak_send_prepend(&send, send.last, p);
            h->st.remote_blocks++;
            continue;
        }
        struct hak_superslab *ss = hak_ss_of(p);
        struct hak_heap *owner = hak_ss_owner(ss);
        if (owner == h) {
            flush_run_put(h, &run, keep_empty, size);
            run = (struct flush_run){ .slab = slab, .ss = ss, .first = p, .last = p, .n = 1 };
            continue;
        }
        hak_send_add(h, &send, p, slab, owner);
        h->st.remote_blocks++;
    }
    flush_run_put(h, &run, keep_empty, size);
    if (send.used) hak_send_all(h, &send);
}

void hak_heap_flush(struct hak_heap *h, struct hak_bin *bin, unsigned n, int keep_empty) {
    hak_spin_lock(&h->lock);
    flush(h, bin, n, keep_empty);
    hak_spin_unlock(&h->lock);
}

/* Blocks of h's runs not on a run free list, and their bytes (h's lock
 * held). */
static size_t out_of_runs(const struct hak_heap *h, size_t *blocks) {
    size_t bytes = 0, n = 0;
    for (const struct hak_superslab *ss = h->ss_list; ss; ss = ss->next)
        for (unsigned i = 1; i < HAK_SLABS_PER_SS; i++) {
            const struct hak_slab *s = &ss->slabs[i];
            if (s->state != HAK_SLAB_FREE && s->state != HAK_SLAB_TAIL) {
                n += s->used;
                bytes += (size_t)s->used * s->block_size;
            }
        }
    *blocks = n;
    return bytes;
}

size_t hak_heap_bytes_out(struct hak_heap *h) {
    size_t blocks;
    hak_spin_lock(&h->lock);
    size_t bytes = out_of_runs(h, &blocks);
    hak_spin_unlock(&h->lock);
    return bytes;
}

void hak_heap_snapshot(struct hak_heap *h, struct hak_heap_stats *st, struct hak_heap_usage *u) {
    hak_spin_lock(&h->lock);
    *st = h->st;
    u->bytes_out = out_of_runs(h, &u->blocks_out);
    u->superslabs = h->ss_count;
    u->orphaned = atomic_load_explicit(&h->orphaned, memory_order_relaxed) != 0;
    hak_spin_unlock(&h->lock);
}

void hak_heap_foreach(void (*fn)(struct hak_heap *, void *), void *arg) {
    hak_spin_lock(&hak_heaps.lock);
    struct hak_heap *h = hak_heaps.all;
    hak_spin_unlock(&hak_heaps.lock);
    for (; h; h = h->next_all) fn(h, arg);
}

/* fork(): every heap's lock, then the list's, so that the child inherits
 * no heap in the middle of a change (it may borrow from or adopt those of
 * threads that do not exist there), and no heap whose lock nobody will
 * ever release: a child that forks in turn takes them all again. Heap
 * locks come first, since their holders may take hak_heaps.lock; heaps
 * are only ever added at the list's head, so a pass that finds the head
 * unchanged once it holds the list's lock has them all. */
static struct hak_heap *fork_heaps;   /* the list as it was when locked */
void hak_heap_fork_prepare(void) {
    struct hak_heap *done = NULL;   /* heaps from here on are locked */
    for (;;) {
        hak_spin_lock(&hak_heaps.lock);
        struct hak_heap *head = hak_heaps.all;
        if (head == done) break;   /* holding the list's lock */
        hak_spin_unlock(&hak_heaps.lock);
        for (struct hak_heap *h = head; h != done; h = h->next_all) hak_spin_lock(&h->lock);
        done = head;
    }
    fork_heaps = done;
}
static void fork_unlock_all(void) {
    hak_spin_unlock(&hak_heaps.lock);
    for (struct hak_heap *h = fork_heaps; h; h = h->next_all) hak_spin_unlock(&h->lock);
}
void hak_heap_fork_parent(void) { fork_unlock_all(); }
void hak_heap_fork_child(void) { fork_unlock_all(); }
