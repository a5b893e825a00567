/* Heaps no thread owns (their thread exited; heap_abandon.c): the queue
 * they wait in to be adopted, and what other threads do meanwhile with
 * what they hold for nobody: drain and trim them (scavenge), or take over
 * their SuperSlabs (absorb). */
#include "backend/heap_int.h"
#include "os/os.h"
#include "base/options.h"

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

/* The queue's next heap, taken off it (NULL: none). */
struct hak_heap *hak_heap_abandoned_take(void) {
    return abandoned_take();
}

/* An exited thread's heap joins the queue. */
void hak_heap_abandoned_add(struct hak_heap *h) {
    hak_spin_lock(&hak_heaps.lock);
    abandoned_push_front(h);
    hak_spin_unlock(&hak_heaps.lock);
}

/* The pages of every free slab of h's SuperSlabs go back now (h is owned
 * by the caller). */
static void purge_free_slabs(struct hak_heap *h) {
    unsigned calls = 0;
    if (h->purge_n) hak_heap_purge_batch(h);
    for (struct hak_superslab *ss = h->ss_list; ss; ss = ss->next)
        hak_heap_dirty_sub(h, hak_ss_purge_free(ss, HAK_SS_ALL_FREE, &calls));
    h->st.decay_purges += calls;
}

/* Collects what an abandoned heap (owned by the caller for the moment)
 * holds for nobody: blocks other threads sent to its inbox and, once it
 * has waited a whole decay period without being adopted, the runs its
 * thread kept (hak_heap_abandon); then SuperSlabs left with no run go back
 * to the pool, and the pages of the free slabs of those that stay (a
 * block still alive elsewhere keeps them) go back at once: nobody uses
 * them, and the clock's idle purge, a few calls a tick over all heaps,
 * left them resident while short-lived threads' heaps piled up (oversub_8:
 * 3-5 MiB of its 17-23 MiB peak; docs/PERFORMANCE.md, "Remote frees and
 * idle heaps"). With the clock off (period 0), the runs go at the first
 * scavenge and nothing is purged. */
static void scavenge(struct hak_heap *h, uint32_t now, uint32_t period, int purge) {
    int trim = 0;
    if (atomic_load_explicit(&h->inbox, memory_order_relaxed)) {
        hak_heap_drain_inbox(h, 0);
        trim = 1;
    }
    int idle = (int32_t)(now - h->abandoned_ms) >= (int32_t)period;
    if (idle) {
        hak_heap_release_empty_runs(h);
        trim = 1;
    }
    if (trim) hak_heap_trim(h);
    if (idle && period && purge) purge_free_slabs(h);
}
void hak_heap_scavenge_one(struct hak_heap *h, uint32_t now, uint32_t period) {
    scavenge(h, now, period, 1);
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

/* Moves SuperSlab ss, with its runs, from heap `from` to heap `to`; the
 * caller owns both. Blocks other threads free meanwhile may still reach
 * from's inbox: its drain forwards them. */
static void ss_move(struct hak_heap *from, struct hak_heap *to, struct hak_superslab *ss) {
    for (unsigned i = 1; i < HAK_SLABS_PER_SS; i++) {
        struct hak_slab *s = &ss->slabs[i];
        if (s->state == HAK_SLAB_CURRENT) {
            from->current[s->cls] = NULL;
            if (s->nfree || s->nhollow || s->carved < s->capacity) hak_heap_partial_push(to, s);
            else s->state = HAK_SLAB_FULL;
        } else if (s->state == HAK_SLAB_PARTIAL) {
            hak_heap_partial_unlink(from, s);
            hak_heap_partial_push(to, s);
        }
    }
    hak_heap_dirty_sub(from, hak_ss_dirty_free(ss));
    hak_heap_dirty_add(to, hak_ss_dirty_free(ss));
    hak_heap_ss_unlink(from, ss);
    hak_heap_ss_link(to, ss);
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
int hak_heap_absorb_abandoned(struct hak_heap *h) {
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS), now = hak_os_clock_ms();
    if (!period) return 0;   /* no clock: the heap waits for a thread to adopt it */
    hak_spin_lock(&hak_heaps.lock);
    size_t n = hak_heaps.nabandoned;
    hak_spin_unlock(&hak_heaps.lock);
    for (size_t i = 0; i < n; i++) {
        int busy, moved = 0;
        struct hak_heap *a = hak_heap_abandoned_take_locked(&busy);
        if (!a) {
            if (busy) continue;
            return 0;
        }
        if ((int32_t)(now - a->abandoned_ms) >= (int32_t)period) {
            /* its empty runs and SuperSlabs go first: moved, they would
             * stay with h for good (nothing releases a run with no block
             * out that no free empties); its free slabs stay resident,
             * since h is about to place runs on them */
            scavenge(a, now, period, 1);
            moved = a->ss_list != NULL;
            while (a->ss_list) ss_move(a, h, a->ss_list);
        }
        hak_heap_abandoned_unlock_return(a);
        if (moved) return 1;
    }
    return 0;
}
