/* Memory nobody uses goes back to the OS on a clock (HAKMEM_DECAY_MS), at
 * a heap's ticks, and on demand (memory pressure, malloc_trim). */
#include "backend/heap_int.h"
#include "backend/large.h"
#include "os/os.h"
#include "base/options.h"

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
 * goes back; a large drop beyond the high goes back at once
 * (HAK_DIRTY_FREE_MAX, heap_runs.c).
 * Two epochs, not a shorter one, so that the high of a heap whose swings
 * settle does not fall step by step, a purge at each step
 * (docs/PERFORMANCE.md, "Giving memory back"). A heap a new thread adopts
 * starts with no high: the exited thread's says nothing of what the new
 * one needs. */
#define HAK_HIGH_EPOCH 64u

/* Free slabs h keeps for its recent high (one tick): what that high had
 * in runs beyond what h has in runs with blocks out now. idle: slabs of
 * its runs with no block out, which do not count toward the high (an
 * exited thread's runs, kept for the thread that adopts its heap, made
 * that thread keep as many free slabs for an epoch). */
static unsigned keep_for_recent_high(struct hak_heap *h, unsigned idle, uint32_t now, uint32_t period,
                                     uint32_t asleep) {
    unsigned used = hak_heap_slabs_in_runs(h) - idle;
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
    return hak_heap_recent_high(h) - used;
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
 * (HAK_EMPTY_KEEP_SLABS, heap_int.h), those a thread's exit keeps for the
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

/* A thread that stops allocating (a worker blocked on a queue, a main
 * thread waiting for its workers) stops its heap's clock: what the heap
 * keeps for its recent high, free slabs and empty SuperSlabs, would stay
 * resident and mapped, out of every other heap's reach, for as long as the
 * thread sleeps (a thread that freed 96 MiB and blocked kept a third of it
 * resident and all of it mapped). So a
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
        hak_heap_release_empty_partial_runs(cur, 1);   /* their slabs purged at a later visit */
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

/* The calling thread's own heap under memory pressure (api/pressure.c):
 * its empty runs, current ones too, and then every SuperSlab with no run
 * go back to the pool. Returns how many SuperSlabs did. */
size_t hak_heap_release_unused(struct hak_heap *h) {
    hak_spin_lock(&h->lock);
    uint64_t before = h->st.ss_released;
    if (atomic_load_explicit(&h->inbox, memory_order_relaxed)) hak_heap_drain_inbox(h, 0);
    hak_heap_release_empty_runs(h);
    hak_heap_trim(h);
    hak_heap_purge_batch(h);
    size_t n = (size_t)(h->st.ss_released - before);
    hak_spin_unlock(&h->lock);
    return n;
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
            hak_heap_release_empty_partial_runs(cur, 0);   /* those its flushes kept for their classes too */
            hak_heap_trim(cur);
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
