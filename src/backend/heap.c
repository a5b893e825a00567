#include "backend/heap.h"
#include "backend/os.h"
#include "core/options.h"
#include "core/track.h"
#include "safety/safety.h"

#include <string.h>

static struct {
    hak_spinlock_t lock;
    struct hak_heap *all;
    struct hak_heap *abandoned, *abandoned_tail;   /* queue: adopted from the head */
    size_t nabandoned;
} heaps = { .lock = HAK_SPINLOCK_INIT };

/* The abandoned queue, under heaps.lock. The head is written atomically:
 * run_new peeks at it without the lock (a hint only). */
static void set_abandoned(struct hak_heap *h) {
    __atomic_store_n(&heaps.abandoned, h, __ATOMIC_RELAXED);
}
static struct hak_heap *abandoned_pop(void) {
    struct hak_heap *h = heaps.abandoned;
    if (!h) return NULL;
    set_abandoned(h->next_abandoned);
    if (!h->next_abandoned) heaps.abandoned_tail = NULL;
    h->next_abandoned = NULL;
    heaps.nabandoned--;
    return h;
}
/* Exited threads' heaps go to the front: their memory is the warmest. */
static void abandoned_push_front(struct hak_heap *h) {
    h->next_abandoned = heaps.abandoned;
    if (!h->next_abandoned) heaps.abandoned_tail = h;
    set_abandoned(h);
    heaps.nabandoned++;
}
static void abandoned_push_back(struct hak_heap *h) {
    h->next_abandoned = NULL;
    if (heaps.abandoned_tail) heaps.abandoned_tail->next_abandoned = h;
    else set_abandoned(h);
    heaps.abandoned_tail = h;
    heaps.nabandoned++;
}

static void drain_inbox(struct hak_heap *h, int keep_empty);
static void remote_push(struct hak_heap *owner, void *first, void *last);
static void scavenge_abandoned(void);

struct hak_heap *hak_heap_acquire(void) {
    hak_spin_lock(&heaps.lock);
    struct hak_heap *h = abandoned_pop();
    hak_spin_unlock(&heaps.lock);
    if (h) return h;
    h = hak_os_meta_alloc(sizeof *h);
    if (!h) return NULL;
    memset(h, 0, sizeof *h);
    hak_spin_lock(&heaps.lock);
    h->next_all = heaps.all;
    heaps.all = h;
    hak_spin_unlock(&heaps.lock);
    return h;
}

/* ---- runs and SuperSlabs ------------------------------------------------ */

static void partial_push(struct hak_heap *h, struct hak_slab *s) {
    s->state = HAK_SLAB_PARTIAL;
    s->prev = NULL;
    s->next = h->partial[s->cls];
    if (s->next) s->next->prev = s;
    h->partial[s->cls] = s;
}

static void partial_unlink(struct hak_heap *h, struct hak_slab *s) {
    if (s->prev) s->prev->next = s->next;
    else h->partial[s->cls] = s->next;
    if (s->next) s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

static void ss_unlink(struct hak_heap *h, struct hak_superslab *ss) {
    if (ss->prev) ss->prev->next = ss->next;
    else h->ss_list = ss->next;
    if (ss->next) ss->next->prev = ss->prev;
    h->ss_count--;
}

/* A run with no block out goes back to its SuperSlab; a SuperSlab with no
 * run goes back to the pool, except the heap's last one (so a heap that
 * oscillates around one SuperSlab does not churn). */
static void run_release(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, int keep_last) {
    hak_ss_run_free(ss, s);
    h->st.runs_freed++;
    if (ss->free_mask == HAK_SS_ALL_FREE && (!keep_last || h->ss_count > 1)) {
        ss_unlink(h, ss);
        h->st.ss_released++;
        hak_ss_release(ss);
    }
}

/* A new run for cls in one of h's SuperSlabs, where it covers the most
 * dirty slabs (see superslab.h); NULL when none has room. */
static struct hak_slab *run_in_own(struct hak_heap *h, unsigned cls) {
    struct hak_superslab *best = NULL;
    unsigned best_pos = 0, best_dirty = 0, n = hak_ss_run_slabs(cls, h->run_level[cls]);
    for (struct hak_superslab *ss = h->ss_list; ss; ss = ss->next) {
        if (!ss->free_mask) continue;
        unsigned dirty, pos = hak_ss_run_fit(ss, n, &dirty);
        if (pos && (!best || dirty > best_dirty)) {
            best = ss;
            best_pos = pos;
            best_dirty = dirty;
            if (dirty == n) break;
        }
    }
    if (!best) return NULL;
    if (h->run_level[cls] < HAK_RUN_LEVELS - 1) h->run_level[cls]++;
    h->st.runs_made++;
    return hak_ss_run_place(best, best_pos, n, cls);
}

/* A new run for cls in a SuperSlab taken from the pool. */
static struct hak_slab *run_in_new_ss(struct hak_heap *h, unsigned cls) {
    /* before taking more memory, collect what exited threads' heaps were
     * sent back (cheap when there is none: one relaxed load) */
    if (__atomic_load_n(&heaps.abandoned, __ATOMIC_RELAXED))
        scavenge_abandoned();
    struct hak_superslab *ss = hak_ss_acquire(h);
    if (!ss) return NULL;
    h->st.ss_acquired++;
    ss->prev = NULL;
    ss->next = h->ss_list;
    if (ss->next) ss->next->prev = ss;
    h->ss_list = ss;
    h->ss_count++;
    h->st.runs_made++;
    unsigned n = hak_ss_run_slabs(cls, h->run_level[cls]);
    if (h->run_level[cls] < HAK_RUN_LEVELS - 1) h->run_level[cls]++;
    return hak_ss_run_alloc(ss, n, cls);
}

/* Gives one block back to its run; the caller holds the run's heap's
 * lock. A run left with no block out goes back to its SuperSlab, unless
 * keep_empty: a borrower draining another heap's inbox keeps the runs
 * whole, so that their blocks can still be lent (borrow()); freed slabs of
 * a heap whose thread does not allocate would be of no use to anyone. */
static void slab_put(struct hak_heap *h, void *p, int keep_empty) {
    struct hak_superslab *ss = hak_ss_of(p);
    struct hak_slab *s = hak_slab_of(ss, p);
    /* the free path checks mid-size blocks only for 16-byte alignment: an
     * interior pointer is caught here, before it can corrupt the run */
    if (HAK_UNLIKELY(!hak_slab_is_block_start(s, p))) {
        hak_report_bad("free", p, HAK_REASON_INTERIOR);
        return;
    }
    hak_link_set(p, s->free);
    s->free = p;
    s->nfree++;
    s->used--;
    if (s->state == HAK_SLAB_CURRENT) return;
    if (s->used == 0 && !keep_empty) {
        if (s->state == HAK_SLAB_PARTIAL) partial_unlink(h, s);
        run_release(h, ss, s, 1);
    } else if (s->state == HAK_SLAB_FULL) {
        partial_push(h, s);
    }
}

/* ---- purge on a clock -------------------------------------------------- */

static void scavenge_one(struct hak_heap *h, uint32_t now, uint32_t period);
static struct hak_heap *abandoned_take_locked(int *busy);
static void abandoned_unlock_return(struct hak_heap *h);

/* Memory that stays free for a decay period (HAKMEM_DECAY_MS) goes back to
 * the OS: the owner looks at a coarse clock on its misses (refill, flush;
 * never on a hit) and, once a period, purges the slabs of its SuperSlabs
 * that were free at its last tick and unused since, the pool's ready
 * SuperSlabs that waited a whole period, and one abandoned heap's. Without
 * it, a heap keeps every page any run ever touched: SuperSlabs passed from
 * thread to thread end up wholly resident, and a workload that shrinks
 * keeps its peak. At most HAK_DECAY_CALLS madvise calls a tick per heap,
 * so the cost stays a few calls per period whatever the heap's size. */
#define HAK_DECAY_CALLS 4u

/* Purges the idle slabs of h's SuperSlabs (the caller owns h) with at
 * most `budget` calls; returns the calls made. */
static unsigned heap_purge_idle(struct hak_heap *h, uint32_t now, uint32_t period, unsigned budget) {
    unsigned calls = 0;
    for (struct hak_superslab *ss = h->ss_list; ss && calls < budget; ss = ss->next)
        calls += hak_ss_purge_idle(ss, now, period, budget - calls);
    return calls;
}

static void heap_decay(struct hak_heap *h) {
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    uint32_t now = hak_os_clock_ms();
    atomic_store_explicit(&h->active_ms, now, memory_order_relaxed);
    if (!period || (int32_t)(now - h->decay_at) < 0) return;
    h->decay_at = now + period;
    h->st.decay_ticks++;
    unsigned calls = heap_purge_idle(h, now, period, HAK_DECAY_CALLS);
    if (calls < HAK_DECAY_CALLS) calls += hak_ss_pool_decay(now, period, HAK_DECAY_CALLS - calls);
    struct hak_heap *idle;
    int busy;
    if (calls < HAK_DECAY_CALLS && __atomic_load_n(&heaps.abandoned, __ATOMIC_RELAXED) &&
        (idle = abandoned_take_locked(&busy))) {
        scavenge_one(idle, now, period);
        calls += heap_purge_idle(idle, now, period, HAK_DECAY_CALLS - calls);
        abandoned_unlock_return(idle);
    }
    h->st.decay_purges += calls;
}

/* ---- refill / flush / remote ------------------------------------------- */

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

/* Before a new run is made for cls (new pages to fault in), free blocks of
 * a larger class that are already resident are used instead: a block
 * handed out this way is freed to its own class (its slab's tag says
 * which); only the double-free check needs to know (it looks in the bins
 * of the classes a block can stand in for: safety/badfree.c). Without it, a class whose count
 * of live blocks drifts up (random sizes) or a phase that moves to larger
 * sizes faults in new runs while its neighbours' runs sit half empty:
 * random_mixed's peak RSS 8.8 -> 7.7 MiB, realloc_grow's 79 -> 63 MiB
 * (docs/PERFORMANCE.md). */
/* Moves free blocks of run s onto the bin: its whole free list as it is
 * when the bin is empty and has room for it (O(1), and no cold block is
 * touched before the program asks for it), else up to want of them. */
static unsigned take_blocks(struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    unsigned got;
    if (!bin->head && s->nfree <= bin->room) {
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
    unsigned got = take_blocks(s, bin, want);
    if (!s->nfree && s->carved == s->capacity) {
        partial_unlink(h, s);
        s->state = HAK_SLAB_FULL;
    }
    return got;
}

/* Free blocks of h's runs of class cls, the current run's first. */
static unsigned take_own(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    struct hak_slab *s = h->current[cls];
    if (s && s->nfree) return take_blocks(s, bin, want);
    for (s = h->partial[cls]; s; s = s->next)
        if (s->nfree) return take_partial(h, s, bin, want);
    return 0;
}

static unsigned refill_from_larger(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    for (unsigned big = cls + 1; big < HAK_NCLASS && hak_class_size[big] <= 2 * hak_class_size[cls]; big++) {
        struct hak_slab *s = h->partial[big];
        if (!s || !s->nfree || !hak_class_stands_in(big, cls)) continue;
        return take_partial(h, s, bin, want);
    }
    return 0;
}

/* Before h carves blocks it never had (new pages), it borrows free ones of
 * class cls from a heap whose owner has had no miss for a decay period and
 * to which other threads have been giving blocks back (its inbox, or its
 * lendable hint): a thread that set memory up and went on to something
 * else (a main thread waiting for its workers) never drains its inbox, and
 * its runs would fill with free blocks nobody may use while the threads
 * freeing them carve new ones (larson: 19.7 -> 15.6 MiB peak). Busy heaps
 * are left alone: borrowing from them only shuffles blocks between
 * threads that use them, at the price of remote frees (larson ran 12%
 * slower). The blocks stay that heap's: they go back to it when freed,
 * like any block a thread frees that another one allocated. Try-locks
 * only, and at most HAK_BORROW_SCAN heaps a call. */
#define HAK_BORROW_SCAN 32u
static unsigned borrow(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    hak_spin_lock(&heaps.lock);
    struct hak_heap *v = heaps.all;
    hak_spin_unlock(&heaps.lock);
    _Atomic uint64_t *word;
    uint64_t bit = (uint64_t)1 << (cls % 64);
    uint32_t now = hak_os_clock_ms(), idle = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    for (unsigned seen = 0; v && seen < HAK_BORROW_SCAN; v = v->next_all, seen++) {
        word = &v->lendable[cls / 64];
        if (v == h || (!(atomic_load_explicit(word, memory_order_relaxed) & bit) &&
                       !atomic_load_explicit(&v->inbox, memory_order_relaxed)) ||
            (int32_t)(now - atomic_load_explicit(&v->active_ms, memory_order_relaxed)) < (int32_t)idle ||
            !hak_spin_trylock(&v->lock))
            continue;
        drain_inbox(v, 1);
        unsigned got = take_own(v, cls, bin, want);
        if (!got) atomic_fetch_and_explicit(word, ~bit, memory_order_relaxed);
        hak_spin_unlock(&v->lock);
        if (got) {
            h->st.borrowed_remote += got;
            return got;
        }
    }
    return 0;
}

/* Accounts for got blocks just moved onto the bin. */
static unsigned refilled(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned got) {
    bin->room -= got < bin->room ? got : bin->room;
    h->st.refills++;
    h->st.refilled_blocks += got;
    h->st.class_refills[cls]++;
    return got;
}

/* Moves SuperSlab ss, with its runs, from heap `from` to heap `to`; the
 * caller owns both. Blocks other threads free meanwhile may still reach
 * from's inbox: its drain forwards them. */
static void ss_move(struct hak_heap *from, struct hak_heap *to, struct hak_superslab *ss) {
    for (unsigned i = 1; i < HAK_SLABS_PER_SS; i++) {
        struct hak_slab *s = &ss->slabs[i];
        if (s->state == HAK_SLAB_CURRENT) {
            from->current[s->cls] = NULL;
            if (s->nfree || s->carved < s->capacity) partial_push(to, s);
            else s->state = HAK_SLAB_FULL;
        } else if (s->state == HAK_SLAB_PARTIAL) {
            partial_unlink(from, s);
            partial_push(to, s);
        }
    }
    ss_unlink(from, ss);
    ss->prev = NULL;
    ss->next = to->ss_list;
    if (ss->next) ss->next->prev = ss;
    to->ss_list = ss;
    to->ss_count++;
    hak_ss_set_owner(ss, to);
}

/* Before h takes a new SuperSlab from the pool, it takes over those of an
 * exited thread's heap that no thread adopted for a whole decay period,
 * with their partly used runs: their free blocks are already resident,
 * and only a thread adopting that heap could use them otherwise. A heap
 * abandoned more recently is left alone: a thread about to start adopts
 * it, runs and all (hak_heap_abandon), and an emptied heap would make that
 * thread build new runs. The emptied heap stays queued for adoption.
 * Returns 1 if anything moved. */
static int absorb_abandoned(struct hak_heap *h) {
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS), now = hak_os_clock_ms();
    hak_spin_lock(&heaps.lock);
    size_t n = heaps.nabandoned;
    hak_spin_unlock(&heaps.lock);
    for (size_t i = 0; i < n; i++) {
        int busy, moved = 0;
        struct hak_heap *a = abandoned_take_locked(&busy);
        if (!a) {
            if (busy) continue;
            return 0;
        }
        if ((int32_t)(now - a->abandoned_ms) >= (int32_t)period) {
            drain_inbox(a, 0);
            moved = a->ss_list != NULL;
            while (a->ss_list) ss_move(a, h, a->ss_list);
        }
        abandoned_unlock_return(a);
        if (moved) return 1;
    }
    return 0;
}

/* Carves up to want blocks from run s's untouched part onto the bin. */
static unsigned carve(struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    unsigned room = s->capacity - s->carved;
    unsigned got = want < room ? want : room;
    uint32_t first = s->carved;
    s->carved += got;
    /* link back to front so the bin hands out ascending addresses */
    void *head = bin->head;
    for (unsigned i = got; i-- > 0;) {
        void *b = hak_slab_block(s, first + i);
        hak_track_noaccess(b, s->block_size);
        hak_link_set(b, head);
        head = b;
    }
    bin->head = head;
    return got;
}

/* Blocks come, in this order, from what is already resident: free blocks
 * of the class's runs, of a larger class's (refill_from_larger), of an
 * idle heap's (borrow); then from the untouched part of the class's
 * current run; then from a run that still has one; then from a new run. */
static unsigned refill(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    heap_decay(h);
    if (atomic_load_explicit(&h->inbox, memory_order_relaxed))
        drain_inbox(h, 0);
    unsigned got;
    for (;;) {
        if ((got = take_own(h, cls, bin, want)) != 0) return refilled(h, cls, bin, got);
        if ((got = refill_from_larger(h, cls, bin, want)) != 0) {
            h->st.borrowed_blocks += got;
            return refilled(h, cls, bin, got);
        }
        if ((got = borrow(h, cls, bin, want)) != 0) return refilled(h, cls, bin, got);
        struct hak_slab *s = h->current[cls];
        if (!s || s->carved == s->capacity) {
            if (s) s->state = HAK_SLAB_FULL;   /* exhausted: off every list until a block returns */
            /* no partial run has free blocks now, so each has untouched ones */
            if ((s = h->partial[cls]) != NULL) {
                partial_unlink(h, s);
                if (s->carved == s->capacity) {   /* cannot happen; never carve nothing */
                    s->state = HAK_SLAB_FULL;
                    continue;
                }
            } else if (!(s = run_in_own(h, cls))) {
                h->current[cls] = NULL;
                if (__atomic_load_n(&heaps.abandoned, __ATOMIC_RELAXED) && absorb_abandoned(h))
                    continue;
                if (!(s = run_in_new_ss(h, cls))) return 0;
            }
            s->state = HAK_SLAB_CURRENT;
            h->current[cls] = s;
        }
        got = carve(s, bin, want);
        s->used += got;
        return refilled(h, cls, bin, got);
    }
}

unsigned hak_heap_refill(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    hak_spin_lock(&h->lock);
    unsigned got = refill(h, cls, bin, want);
    hak_spin_unlock(&h->lock);
    return got;
}

void *hak_heap_take_one(struct hak_heap *h, unsigned cls) {
    struct hak_bin one = { 0 };
    return hak_heap_refill(h, cls, &one, 1) ? one.head : NULL;
}

static void remote_push(struct hak_heap *owner, void *first, void *last) {
    void *old = atomic_load_explicit(&owner->inbox, memory_order_relaxed);
    do {
        hak_link_set(last, old);
    } while (!atomic_compare_exchange_weak_explicit(&owner->inbox, &old, first,
                                                    memory_order_release, memory_order_relaxed));
}

static void flush(struct hak_heap *h, struct hak_bin *bin, unsigned n) {
    struct hak_heap *chain_owner = NULL;
    void *chain_first = NULL, *chain_last = NULL;
    unsigned chain_len = 0;
    heap_decay(h);
    h->st.flushes++;
    h->st.flushed_blocks += n;
    for (unsigned i = 0; i < n && bin->head; i++) {
        void *p = bin->head;
        bin->head = hak_link_get(p);
        bin->room++;
        struct hak_heap *owner = hak_ss_owner(hak_ss_of(p));
        if (owner == h) { slab_put(h, p, 0); continue; }
        if (owner != chain_owner && chain_first) {
            remote_push(chain_owner, chain_first, chain_last);
            h->st.remote_pushes++;
            chain_first = NULL;
        }
        if (!chain_first) { chain_owner = owner; chain_first = p; chain_len = 0; }
        else hak_link_set(chain_last, p);
        chain_last = p;
        chain_len++;
        h->st.remote_blocks++;
    }
    if (chain_first) {
        remote_push(chain_owner, chain_first, chain_last);
        h->st.remote_pushes++;
    }
    (void)chain_len;
}

void hak_heap_flush(struct hak_heap *h, struct hak_bin *bin, unsigned n) {
    hak_spin_lock(&h->lock);
    flush(h, bin, n);
    hak_spin_unlock(&h->lock);
}

void hak_heap_free_remote(void *p) {
    remote_push(hak_ss_owner(hak_ss_of(p)), p, p);
}

static void drain_inbox(struct hak_heap *h, int keep_empty) {
    void *p = atomic_exchange_explicit(&h->inbox, NULL, memory_order_acquire);
    if (!p) return;
    h->st.inbox_drains++;
    uint64_t classes[(HAK_NCLASS + 63) / 64] = { 0 };
    while (p) {
        void *next = hak_link_get(p);
        struct hak_superslab *ss = hak_ss_of(p);
        struct hak_heap *owner = hak_ss_owner(ss);
        if (HAK_LIKELY(owner == h)) {
            unsigned cls = hak_slab_of(ss, p)->cls;
            classes[cls / 64] |= (uint64_t)1 << (cls % 64);
            slab_put(h, p, keep_empty);
        } else {
            remote_push(owner, p, p);   /* its SuperSlab moved to another heap (ss_move) */
        }
        h->st.inbox_blocks++;
        p = next;
    }
    for (unsigned w = 0; w < (HAK_NCLASS + 63) / 64; w++)
        if (classes[w]) atomic_fetch_or_explicit(&h->lendable[w], classes[w], memory_order_relaxed);
}

int hak_heap_holds_free(struct hak_heap *h, const void *p) {
    struct hak_superslab *ss = hak_ss_of(p);
    int found = 0;
    hak_spin_lock(&h->lock);
    if (hak_ss_owner(ss) == h) {
        struct hak_slab *s = hak_slab_of(ss, p);
        uint32_t n = 0;
        for (void *q = s->free; q && n < s->nfree && !found; q = hak_link_get(q), n++)
            found = q == p;
    }
    hak_spin_unlock(&h->lock);
    if (found) return 1;
    /* blocks other threads sent back; only the owner unlinks them */
    unsigned n = 0;
    for (void *q = atomic_load_explicit(&h->inbox, memory_order_acquire); q && n < 65536;
         q = hak_link_get(q), n++)
        if (q == p) return 1;
    return 0;
}

size_t hak_heap_bytes_out(struct hak_heap *h) {
    size_t bytes = 0;
    hak_spin_lock(&h->lock);
    for (const struct hak_superslab *ss = h->ss_list; ss; ss = ss->next)
        for (unsigned i = 1; i < HAK_SLABS_PER_SS; i++) {
            const struct hak_slab *s = &ss->slabs[i];
            if (s->state != HAK_SLAB_FREE && s->state != HAK_SLAB_TAIL)
                bytes += (size_t)s->used * s->block_size;
        }
    hak_spin_unlock(&h->lock);
    return bytes;
}

/* ---- thread exit -------------------------------------------------------- */

/* Returns every SuperSlab with no run in use to the pool. */
static void heap_trim(struct hak_heap *h) {
    struct hak_superslab *ss = h->ss_list;
    while (ss) {
        struct hak_superslab *next = ss->next;
        if (ss->free_mask == HAK_SS_ALL_FREE) {
            ss_unlink(h, ss);
            h->st.ss_released++;
            hak_ss_release(ss);
        }
        ss = next;
    }
}

/* Blocks freed into an abandoned heap's inbox would wait for the next thread
 * to adopt it. Whoever takes an abandoned heap off the queue owns it for
 * the moment: drain it, give its empty memory back, and queue it at the
 * back. One heap at a time, so a thread starting meanwhile still finds the
 * others to adopt (taking the whole queue at once made starting threads
 * build new heaps instead: 2,191 heaps after 40,000 short-lived threads). */
static struct hak_heap *abandoned_take(void) {
    hak_spin_lock(&heaps.lock);
    struct hak_heap *h = abandoned_pop();
    hak_spin_unlock(&heaps.lock);
    return h;
}
static void abandoned_return(struct hak_heap *h) {
    hak_spin_lock(&heaps.lock);
    abandoned_push_back(h);
    hak_spin_unlock(&heaps.lock);
}
/* The next abandoned heap, taken off the queue and locked (the caller
 * holds its own heap's lock, so it only try-locks: a thread borrowing from
 * that heap may hold it for a moment); *busy is set when the heap was
 * locked and went back to the queue. NULL when the queue is empty. */
static struct hak_heap *abandoned_take_locked(int *busy) {
    struct hak_heap *h = abandoned_take();
    *busy = h && !hak_spin_trylock(&h->lock);
    if (*busy) abandoned_return(h);
    return *busy ? NULL : h;
}
static void abandoned_unlock_return(struct hak_heap *h) {
    hak_spin_unlock(&h->lock);
    abandoned_return(h);
}
/* Releases the runs of h that have no block out (the caller holds h's
 * lock): what an exited thread kept for its successor once nobody took
 * it, and runs a borrower kept whole (slab_put). */
static void release_empty_runs(struct hak_heap *h) {
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++) {
        struct hak_slab *s = h->current[c];
        if (s && !s->used) {
            h->current[c] = NULL;
            run_release(h, hak_ss_of_slab(s), s, 0);
        }
        for (struct hak_slab *next, *p = h->partial[c]; p; p = next) {
            next = p->next;
            if (p->used) continue;
            partial_unlink(h, p);
            run_release(h, hak_ss_of_slab(p), p, 0);
        }
    }
}

/* Collects what an abandoned heap (owned by the caller for the moment)
 * holds for nobody: blocks other threads sent to its inbox and, once it
 * has waited a whole decay period without being adopted, the runs its
 * thread kept (hak_heap_abandon); then SuperSlabs left with no run go back
 * to the pool. With the clock off (period 0), the runs go at the first
 * scavenge. */
static void scavenge_one(struct hak_heap *h, uint32_t now, uint32_t period) {
    int trim = 0;
    if (atomic_load_explicit(&h->inbox, memory_order_relaxed)) {
        drain_inbox(h, 0);
        trim = 1;
    }
    if ((int32_t)(now - h->abandoned_ms) >= (int32_t)period) {
        release_empty_runs(h);
        trim = 1;
    }
    if (trim) heap_trim(h);
}

static void scavenge_abandoned(void) {
    hak_spin_lock(&heaps.lock);
    size_t n = heaps.nabandoned;
    hak_spin_unlock(&heaps.lock);
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS), now = hak_os_clock_ms();
    for (size_t i = 0; i < n; i++) {
        int busy;
        struct hak_heap *h = abandoned_take_locked(&busy);
        if (!h) {
            if (busy) continue;
            return;
        }
        scavenge_one(h, now, period);
        abandoned_unlock_return(h);
    }
}

/* The heap keeps its current runs, emptied or not, with their free blocks
 * already carved: the thread that adopts it next (often one just like the
 * one that exited) allocates from the same pages instead of carving new
 * runs elsewhere. Releasing them here made every short-lived thread place
 * and touch fresh runs: churn_threads peak RSS 15.7 -> 4.4 MiB
 * (docs/PERFORMANCE.md). Runs nobody adopts are released after a decay
 * period (scavenge_one). */
void hak_heap_abandon(struct hak_heap *h) {
    hak_spin_lock(&h->lock);
    drain_inbox(h, 0);
    heap_decay(h);
    heap_trim(h);
    h->abandoned_ms = hak_os_clock_ms();
    hak_spin_unlock(&h->lock);
    hak_spin_lock(&heaps.lock);
    abandoned_push_front(h);
    hak_spin_unlock(&heaps.lock);
}

void hak_heap_foreach(void (*fn)(struct hak_heap *, void *), void *arg) {
    hak_spin_lock(&heaps.lock);
    struct hak_heap *h = heaps.all;
    hak_spin_unlock(&heaps.lock);
    for (; h; h = h->next_all) fn(h, arg);
}

/* fork(): every heap's lock, then the list's, so that the child inherits
 * no heap in the middle of a change (it may borrow from or adopt those of
 * threads that do not exist there). Heap locks come first: their holders
 * may take heaps.lock. */
static struct hak_heap *fork_heaps;   /* the list as it was when locked */
void hak_heap_fork_prepare(void) {
    hak_spin_lock(&heaps.lock);
    fork_heaps = heaps.all;
    hak_spin_unlock(&heaps.lock);
    for (struct hak_heap *h = fork_heaps; h; h = h->next_all) hak_spin_lock(&h->lock);
    hak_spin_lock(&heaps.lock);
}
static void fork_unlock_all(void) {
    hak_spin_unlock(&heaps.lock);
    for (struct hak_heap *h = fork_heaps; h; h = h->next_all) hak_spin_unlock(&h->lock);
}
void hak_heap_fork_parent(void) { fork_unlock_all(); }
void hak_heap_fork_child(void) { fork_unlock_all(); }
