/* Memory nobody uses: heaps of exited threads (abandoned, then adopted
 * whole by a thread that starts, or scavenged), and the purge on a clock
 * that gives back what stayed free for a decay period. */
#include "backend/heap_int.h"
#include "backend/large.h"
#include "os/os.h"
#include "base/options.h"

#include <string.h>

/* The abandoned queue (see heap_int.h), under hak_heaps.lock. */
static void set_abandoned(struct hak_heap *h) {
    __atomic_store_n(&hak_heaps.abandoned, h, __ATOMIC_RELAXED);
}
static struct hak_heap *abandoned_pop(void) {
    struct hak_heap *h = hak_heaps.abandoned;
    if (!h) return NULL;
    set_abandoned(h->next_abandoned);
    if (!h->next_abandoned) hak_heaps.abandoned_tail = NULL;
    h->next_abandoned = NULL;
    hak_heaps.nabandoned--;
    return h;
}
/* Exited threads' heaps go to the front: their memory is the warmest. */
static void abandoned_push_front(struct hak_heap *h) {
    h->next_abandoned = hak_heaps.abandoned;
    if (!h->next_abandoned) hak_heaps.abandoned_tail = h;
    set_abandoned(h);
    hak_heaps.nabandoned++;
}
static void abandoned_push_back(struct hak_heap *h) {
    h->next_abandoned = NULL;
    if (hak_heaps.abandoned_tail) hak_heaps.abandoned_tail->next_abandoned = h;
    else set_abandoned(h);
    hak_heaps.abandoned_tail = h;
    hak_heaps.nabandoned++;
}

struct hak_heap *hak_heap_acquire(void) {
    hak_spin_lock(&hak_heaps.lock);
    struct hak_heap *h = abandoned_pop();
    hak_spin_unlock(&hak_heaps.lock);
    if (h) {
        /* no recent high yet (see keep_for_recent_high) */
        hak_spin_lock(&h->lock);
        atomic_store_explicit(&h->orphaned, 0, memory_order_relaxed);
        h->high_now = h->high_last = 0;
        h->high_since = hak_os_clock_ms();
        h->dropped_bytes = 0;   /* the exited thread's fall says nothing either */
        hak_spin_unlock(&h->lock);
        return h;
    }
    h = hak_os_meta_alloc(sizeof *h);
    if (!h) return NULL;
    memset(h, 0, sizeof *h);
    /* the clock's stamps start now: a stamp of 0 reads as the future for
     * the half of its 49.7-day cycle past 2^31 ms, and a heap whose first
     * tick waits for that time never ticks */
    uint32_t now = hak_os_clock_ms();
    h->decay_at = h->high_since = now;
    atomic_store_explicit(&h->active_ms, now, memory_order_relaxed);
    hak_spin_lock(&hak_heaps.lock);
    h->next_all = hak_heaps.all;
    __atomic_store_n(&hak_heaps.all, h, __ATOMIC_RELEASE);   /* borrowers read it unlocked */
    hak_spin_unlock(&hak_heaps.lock);
    return h;
}

/* ---- purge on a clock -------------------------------------------------- */


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
 * most `budget` calls, until `excess` dirty slabs went back; returns the
 * calls made. */
static unsigned heap_purge_idle(struct hak_heap *h, uint32_t now, uint32_t period, unsigned budget,
                                unsigned excess) {
    unsigned calls = 0;
    for (struct hak_superslab *ss = h->ss_list; ss && calls < budget; ss = ss->next) {
        unsigned before = hak_ss_dirty_free(ss);
        calls += hak_ss_purge_idle(ss, now, period, budget - calls, &excess);
        hak_heap_dirty_sub(h, before - hak_ss_dirty_free(ss));
    }
    return calls;
}

/* A heap whose live size swings (a server between bursts, realloc_grow's
 * buffers growing and shrinking in waves) would give back at every trough
 * the slabs it takes again at the next crest: a madvise, then page faults,
 * for memory it keeps needing, and no lower peak. So the clock leaves
 * resident as many free slabs as the heap had slabs in runs at its recent
 * high: the most it had in runs at any tick of this epoch or the last one
 * (HAK_HIGH_EPOCH periods each, 1.3 s at the default period; counted in
 * time, not ticks, since a heap ticks only on its misses: one that missed
 * once a second kept its crest's slabs for two minutes). Once the heap
 * stays smaller for two epochs, the high falls to its new size and the rest
 * goes back; a large drop goes back at once (HAK_DIRTY_FREE_MAX, heap_runs.c).
 * realloc_grow, whose runs swing between 500 and 800 slabs about every
 * 100 ms, made about 210 madvise calls between 0.2 s and 1.4 s of its run
 * (2.9 per 100,000 operations); now none. With a 16-tick epoch, whose
 * high still fell step by step as the swings settled, 1.0 per 100,000.
 * A heap a new thread adopts starts with no high: the exited thread's
 * says nothing of what the new one needs (churn_threads kept 170 KiB
 * more with it, 30 runs each). */
#define HAK_HIGH_EPOCH 64u
/* The high is sampled at ticks and misses the peaks between them: a few
 * slabs over it (1/HAK_HIGH_SLACK_DIV of it) are kept as well rather than
 * purged one stretch a tick. A fixed 16 slabs kept a MiB in each of
 * churn_threads' small heaps (peak RSS +170 KiB in 30 runs). */
#define HAK_HIGH_SLACK_DIV 16u

static unsigned slabs_in_runs(const struct hak_heap *h) {
    return h->ss_count * (unsigned)__builtin_popcount(HAK_SS_ALL_FREE) - h->free_slabs;
}

static unsigned recent_high(const struct hak_heap *h) {
    unsigned high = h->high_last > h->high_now ? h->high_last : h->high_now;
    return high + high / HAK_HIGH_SLACK_DIV;
}

int hak_heap_within_recent_high(const struct hak_heap *h) {
    return slabs_in_runs(h) + h->dirty_free <= recent_high(h);
}

/* Free slabs h keeps for its recent high (one tick): what that high had
 * in runs beyond what h has in runs with blocks out now. idle: slabs of
 * its runs with no block out, which do not count toward the high (an
 * exited thread's runs, kept for the thread that adopts its heap, made
 * that thread keep as many free slabs for an epoch). */
static unsigned keep_for_recent_high(struct hak_heap *h, unsigned idle, uint32_t now, uint32_t period,
                                     uint32_t asleep) {
    unsigned used = slabs_in_runs(h) - idle;
    if (used > h->high_now) h->high_now = used;
    uint32_t epoch = period > INT32_MAX / HAK_HIGH_EPOCH ? INT32_MAX : HAK_HIGH_EPOCH * period;
    uint32_t since = now - h->high_since;
    if (since >= epoch) {
        /* a heap with no tick for two epochs (asleep: since its last
         * tick, not since the epoch began) had nothing in its last one */
        h->high_last = asleep / 2 >= epoch ? used : h->high_now;
        h->high_now = used;
        h->high_since = now;
    }
    return recent_high(h) - used;
}

/* Slabs of h's partly used runs with no block out. */
static unsigned empty_run_slabs(const struct hak_heap *h) {
    unsigned n = 0;
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++)
        for (const struct hak_slab *s = h->partial[c]; s; s = s->next)
            if (!s->used) n += s->nslabs;
    return n;
}

/* Partly used runs with no block out: those a flush kept for their class
 * (HAK_EMPTY_KEEP_SLABS, heap.c), those a thread's exit keeps for the
 * thread that adopts its heap (hak_heap_flush's keep_empty) and those a
 * borrower's drain keeps. A run found empty at two ticks in a row went
 * unused for a whole period (taking blocks clears the mark). One that a
 * flush kept stays while the heap's recent high covers it (budget: the
 * slabs that high keeps, shared with the free slabs that follow); any
 * other goes back to its SuperSlab, where the clock purges its slabs.
 * Without the release, an adopter that never used those classes kept
 * their pages for as long as it lived (an adopter starts with no high);
 * without the budget, a run kept at a trough was given back before its
 * class's next crest, and the crest carved another, on a slab that
 * another class had left wholly resident. Returns the budget left for
 * free slabs. */
static unsigned release_runs_empty_for_a_period(struct hak_heap *h, unsigned budget) {
    unsigned kept = 0;
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++) {
        for (struct hak_slab *next, *s = h->partial[c]; s; s = next) {
            next = s->next;
            if (s->used) {
                s->seen_empty = 0;
                continue;
            }
            if (!s->seen_empty) {
                s->seen_empty = 1;
                budget -= budget < s->nslabs ? budget : s->nslabs;
            } else if (s->kept && budget >= s->nslabs) {
                budget -= s->nslabs;
            } else {
                hak_heap_partial_unlink(h, s);
                hak_heap_run_release(h, hak_ss_of_slab(s), s, 1);
                continue;
            }
            if (s->kept) kept += s->nslabs;
        }
    }
    h->empty_slabs = kept;
    return budget;
}

/* Empty SuperSlabs the heap kept for its recent high (hak_heap_run_release)
 * go to the pool, where other heaps can take them, once the clock has
 * purged all their slabs; the heap keeps its last one. */
static void release_purged_empty(struct hak_heap *h) {
    for (struct hak_superslab *next, *ss = h->ss_list; ss && h->ss_count > 1; ss = next) {
        next = ss->next;
        if (ss->free_mask == HAK_SS_ALL_FREE && !hak_ss_dirty_free(ss)) {
            hak_heap_ss_unlink(h, ss);
            h->st.ss_released++;
            hak_ss_release(ss);
        }
    }
}

/* h's partly used runs with no block out go back to their SuperSlabs,
 * or with kept_only those of them its flushes kept for their classes,
 * the heap then keeping its last SuperSlab (the caller holds h's lock;
 * any thread may: a current run stays). */
static void release_empty_partial_runs(struct hak_heap *h, int kept_only) {
    if (kept_only && !h->empty_slabs) return;
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++)
        for (struct hak_slab *next, *p = h->partial[c]; p; p = next) {
            next = p->next;
            if (p->used || (kept_only && !p->kept)) continue;
            hak_heap_partial_unlink(h, p);
            hak_heap_run_release(h, hak_ss_of_slab(p), p, kept_only);
        }
    h->empty_slabs = 0;
}

/* A thread that stops allocating (a worker blocked on a queue, a main
 * thread waiting for its workers) stops its heap's clock: what the heap
 * keeps for its recent high, free slabs and empty SuperSlabs, would stay
 * resident and mapped, out of every other heap's reach, for as long as the
 * thread sleeps (an idle thread kept 36 MB resident and 100 MiB mapped
 * after freeing 96 MiB; before the high it was 8 MB after a second). So a
 * tick also looks after another heap whose owner has had no miss for a
 * whole period (the test borrowing uses): the empty runs its flushes
 * kept for their classes go back to their SuperSlabs (not those a
 * borrower's drain keeps whole for lending), its idle slabs are purged
 * with no high kept, and its SuperSlabs left empty and clean go to the
 * pool, where any heap can take them. One such heap a tick, in turn;
 * try-lock only, as its owner may wake up meanwhile. */
#define HAK_IDLE_SCAN 8u
static unsigned decay_idle_heap(struct hak_heap *h, uint32_t now, uint32_t period, unsigned budget) {
    struct hak_heap *head = __atomic_load_n(&hak_heaps.all, __ATOMIC_ACQUIRE);
    struct hak_heap *v = h->idle_next ? h->idle_next : head;
    unsigned calls = 0;
    for (unsigned seen = 0; v && seen < HAK_IDLE_SCAN; seen++) {
        struct hak_heap *cur = v;
        v = v->next_all ? v->next_all : head;
        if (cur == h ||
            (int32_t)(now - atomic_load_explicit(&cur->active_ms, memory_order_relaxed)) < (int32_t)period ||
            !hak_spin_trylock(&cur->lock))
            continue;
        release_empty_partial_runs(cur, 1);   /* their slabs purged at a later visit */
        calls = heap_purge_idle(cur, now, period, budget, UINT32_MAX);
        release_purged_empty(cur);
        hak_spin_unlock(&cur->lock);
        break;
    }
    h->idle_next = v;
    return calls;
}

void hak_heap_decay(struct hak_heap *h) {
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    uint32_t now = hak_os_clock_ms();
    atomic_store_explicit(&h->active_ms, now, memory_order_relaxed);
    /* not yet while the tick is at most a period ahead; a stamp further
     * off is stale (the clock wrapped while the thread slept) */
    if (!period || (uint32_t)(h->decay_at - now) - 1u < period) return;
    uint32_t asleep = now - (h->decay_at - period);   /* since the last tick */
    h->decay_at = now + period;
    h->st.decay_ticks++;
    if (h->purge_n) hak_heap_purge_batch(h);
    hak_heap_hollow_tick(h, now, period);
    unsigned keep = keep_for_recent_high(h, empty_run_slabs(h), now, period, asleep);
    keep = release_runs_empty_for_a_period(h, keep);
    unsigned calls = heap_purge_idle(h, now, period, HAK_DECAY_CALLS, h->dirty_free > keep ? h->dirty_free - keep : 0);
    release_purged_empty(h);
    if (calls < HAK_DECAY_CALLS) calls += hak_ss_pool_decay(now, period, HAK_DECAY_CALLS - calls);
    if (calls < HAK_DECAY_CALLS) calls += hak_large_decay(now, period, HAK_DECAY_CALLS - calls);
    struct hak_heap *idle;
    int busy;
    if (h->fed_orphans) {
        /* what it sent to orphans' inboxes since its last tick */
        h->fed_orphans = 0;
        hak_heap_scavenge_abandoned();
    }
    if (calls < HAK_DECAY_CALLS && __atomic_load_n(&hak_heaps.abandoned, __ATOMIC_RELAXED) &&
        (idle = hak_heap_abandoned_take_locked(&busy))) {
        hak_heap_scavenge_one(idle, now, period);
        calls += heap_purge_idle(idle, now, period, HAK_DECAY_CALLS - calls, UINT32_MAX);   /* nobody's */
        hak_heap_abandoned_unlock_return(idle);
    }
    if (calls < HAK_DECAY_CALLS) calls += decay_idle_heap(h, now, period, HAK_DECAY_CALLS - calls);
    h->st.decay_purges += calls;
}

/* ---- thread exit -------------------------------------------------------- */

/* Returns every SuperSlab with no run in use to the pool. */
static void heap_trim(struct hak_heap *h) {
    struct hak_superslab *ss = h->ss_list;
    while (ss) {
        struct hak_superslab *next = ss->next;
        if (ss->free_mask == HAK_SS_ALL_FREE) {
            hak_heap_dirty_sub(h, hak_ss_dirty_free(ss));
            hak_heap_ss_unlink(h, ss);
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
    hak_spin_lock(&hak_heaps.lock);
    struct hak_heap *h = abandoned_pop();
    hak_spin_unlock(&hak_heaps.lock);
    return h;
}
static void abandoned_return(struct hak_heap *h) {
    hak_spin_lock(&hak_heaps.lock);
    abandoned_push_back(h);
    hak_spin_unlock(&hak_heaps.lock);
}
/* The next abandoned heap, taken off the queue and locked (the caller
 * holds its own heap's lock, so it only try-locks: a thread borrowing from
 * that heap may hold it for a moment); *busy is set when the heap was
 * locked and went back to the queue. NULL when the queue is empty. */
struct hak_heap *hak_heap_abandoned_take_locked(int *busy) {
    struct hak_heap *h = abandoned_take();
    *busy = h && !hak_spin_trylock(&h->lock);
    if (*busy) abandoned_return(h);
    return *busy ? NULL : h;
}
void hak_heap_abandoned_unlock_return(struct hak_heap *h) {
    hak_spin_unlock(&h->lock);
    abandoned_return(h);
}

/* Releases the runs of h that have no block out, current ones too (the
 * caller holds h's lock): what an exited thread kept for its successor
 * once nobody took it, runs a borrower kept whole and those flushes kept
 * for their classes (run_put, heap.c). */
static void release_empty_runs(struct hak_heap *h) {
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++) {
        struct hak_slab *s = h->current[c];
        if (s && !s->used) {
            h->current[c] = NULL;
            hak_heap_run_release(h, hak_ss_of_slab(s), s, 0);
        }
    }
    release_empty_partial_runs(h, 0);
}

/* The calling thread's own heap under memory pressure (api/pressure.c):
 * its empty runs, current ones too, and then every SuperSlab with no run
 * go back to the pool. Returns how many SuperSlabs did. */
size_t hak_heap_release_unused(struct hak_heap *h) {
    hak_spin_lock(&h->lock);
    uint64_t before = h->st.ss_released;
    if (atomic_load_explicit(&h->inbox, memory_order_relaxed)) hak_heap_drain_inbox(h, 0);
    release_empty_runs(h);
    heap_trim(h);
    hak_heap_purge_batch(h);
    size_t n = (size_t)(h->st.ss_released - before);
    hak_spin_unlock(&h->lock);
    return n;
}

/* Collects what an abandoned heap (owned by the caller for the moment)
 * holds for nobody: blocks other threads sent to its inbox and, once it
 * has waited a whole decay period without being adopted, the runs its
 * thread kept (hak_heap_abandon); then SuperSlabs left with no run go back
 * to the pool. With the clock off (period 0), the runs go at the first
 * scavenge. */
void hak_heap_scavenge_one(struct hak_heap *h, uint32_t now, uint32_t period) {
    int trim = 0;
    if (atomic_load_explicit(&h->inbox, memory_order_relaxed)) {
        hak_heap_drain_inbox(h, 0);
        trim = 1;
    }
    if ((int32_t)(now - h->abandoned_ms) >= (int32_t)period) {
        release_empty_runs(h);
        trim = 1;
    }
    if (trim) heap_trim(h);
}

/* Under memory pressure (api/pressure.c): the empty SuperSlabs of every
 * heap but the caller's go to the pool, whatever their heap's high (a
 * sleeping thread's heap, or a heap whose thread a fork() left behind in
 * the child, would never let them go). Try-lock only. */
size_t hak_heap_release_empty_elsewhere(struct hak_heap *self) {
    size_t n = 0;
    for (struct hak_heap *cur = __atomic_load_n(&hak_heaps.all, __ATOMIC_ACQUIRE); cur; cur = cur->next_all) {
        if (cur == self || !hak_spin_trylock(&cur->lock)) continue;
        uint64_t before = cur->st.ss_released;
        /* a heap nobody owns gives up what waits in its inbox and the runs
         * it kept for an adopter too, as if it had waited its decay period
         * (an adopter that took it off the queue meanwhile waits for the
         * lock and then finds fewer runs) */
        if (atomic_load_explicit(&cur->orphaned, memory_order_relaxed)) {
            hak_heap_scavenge_one(cur, hak_os_clock_ms(), 0);
        } else {
            release_empty_partial_runs(cur, 0);   /* those its flushes kept for their classes too */
            heap_trim(cur);
        }
        n += (size_t)(cur->st.ss_released - before);
        hak_spin_unlock(&cur->lock);
    }
    return n;
}

size_t hak_heap_purge_all_free(struct hak_heap *self) {
    size_t n = 0;
    for (struct hak_heap *cur = __atomic_load_n(&hak_heaps.all, __ATOMIC_ACQUIRE); cur; cur = cur->next_all) {
        if (!hak_spin_trylock(&cur->lock)) continue;
        if (cur == self) n += hak_heap_hollow_all(cur);
        unsigned calls = 0;
        if (cur->purge_n) hak_heap_purge_batch(cur);
        for (struct hak_superslab *ss = cur->ss_list; ss; ss = ss->next) {
            unsigned purged = hak_ss_purge_free(ss, HAK_SS_ALL_FREE, &calls);
            hak_heap_dirty_sub(cur, purged);
            n += purged;
        }
        cur->st.decay_purges += calls;
        hak_spin_unlock(&cur->lock);
    }
    return n;
}

void hak_heap_scavenge_abandoned(void) {
    hak_spin_lock(&hak_heaps.lock);
    size_t n = hak_heaps.nabandoned;
    hak_spin_unlock(&hak_heaps.lock);
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS), now = hak_os_clock_ms();
    for (size_t i = 0; i < n; i++) {
        int busy;
        struct hak_heap *h = hak_heap_abandoned_take_locked(&busy);
        if (!h) {
            if (busy) continue;
            return;
        }
        hak_heap_scavenge_one(h, now, period);
        hak_heap_abandoned_unlock_return(h);
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
    /* orphaned before the last drain: a thread pushing to the inbox from
     * now on either is drained here or sees the flag (pushed_to_orphan in
     * heap.c) and scavenges later */
    atomic_store_explicit(&h->orphaned, 1, memory_order_seq_cst);
    hak_heap_drain_inbox(h, 0);
    hak_heap_decay(h);
    heap_trim(h);
    h->abandoned_ms = hak_os_clock_ms();
    int fed = h->fed_orphans;
    h->fed_orphans = 0;
    hak_spin_unlock(&h->lock);
    hak_spin_lock(&hak_heaps.lock);
    abandoned_push_front(h);
    hak_spin_unlock(&hak_heaps.lock);
    /* blocks this thread sent to heaps nobody owns: nobody else may come
     * for them (an idle process keeps them resident until exit) */
    if (fed) hak_heap_scavenge_abandoned();
}

