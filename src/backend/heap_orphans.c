/* Heaps no thread owns (their thread exited; heap_abandon.c): the queue
 * they wait in to be adopted, and what other threads do meanwhile with
 * what they hold for nobody: drain and trim them (scavenge), or take over
 * their SuperSlabs (absorb). */
#include "backend/heap_int.h"
#include "os/os.h"
#include "base/options.h"

/* The abandoned queue (see heap_int.h), under hak_heaps.lock: the heaps
 * still warm first, up to warm_tail, newest first (a starting thread
 * adopts the head); then those scavenged after waiting a decay period,
 * whose kept runs are gone. */
static void set_abandoned(struct hak_heap *h) {
    __atomic_store_n(&hak_heaps.abandoned, h, __ATOMIC_RELAXED);
}
/* Takes h, which follows prev (NULL: h is the head), off the queue. */
static struct hak_heap *unlink_after(struct hak_heap *prev, struct hak_heap *h) {
    if (prev) prev->next_abandoned = h->next_abandoned;
    else set_abandoned(h->next_abandoned);
    if (hak_heaps.abandoned_tail == h) hak_heaps.abandoned_tail = prev;
    if (hak_heaps.warm_tail == h) hak_heaps.warm_tail = prev;
    h->next_abandoned = NULL;
    hak_heaps.nabandoned--;
    hak_heaps.nwarm -= !h->scavenged;
    return h;
}
/* Puts h into the queue after prev (NULL: at the head). */
static void link_after(struct hak_heap *prev, struct hak_heap *h) {
    struct hak_heap **at = prev ? &prev->next_abandoned : &hak_heaps.abandoned;
    h->next_abandoned = *at;
    if (prev) prev->next_abandoned = h;
    else set_abandoned(h);
    if (hak_heaps.abandoned_tail == prev) hak_heaps.abandoned_tail = h;
    hak_heaps.nabandoned++;
    hak_heaps.nwarm += !h->scavenged;
}
static struct hak_heap *abandoned_pop(void) {
    struct hak_heap *h = hak_heaps.abandoned;
    return h ? unlink_after(NULL, h) : NULL;
}
/* Exited threads' heaps go to the front: their memory is the warmest. */
static void abandoned_push_front(struct hak_heap *h) {
    if (h->scavenged) {   /* behind the warm ones, if any */
        link_after(hak_heaps.warm_tail, h);
        return;
    }
    link_after(NULL, h);
    if (!hak_heaps.warm_tail) hak_heaps.warm_tail = h;
}
/* A heap that was taken off the queue for a moment goes back behind the
 * others of its kind, so that a pass over the whole queue leaves their
 * order as it was; one scavenged just now (was_scavenged 0) goes first
 * among the scavenged ones instead, as the most recently used of them. */
static void abandoned_push_back(struct hak_heap *h, int was_scavenged) {
    if (h->scavenged) {
        link_after(was_scavenged ? hak_heaps.abandoned_tail : hak_heaps.warm_tail, h);
        return;
    }
    link_after(hak_heaps.warm_tail, h);
    hak_heaps.warm_tail = h;
}

/* Blocks freed into an abandoned heap's inbox would wait for the next thread
 * to adopt it. Whoever takes an abandoned heap off the queue owns it for
 * the moment: drain it, give its empty memory back, and queue it again.
 * One heap at a time, so a thread starting meanwhile still finds the
 * others to adopt (taking the whole queue at once made starting threads
 * build new heaps instead: 2,191 heaps after 40,000 short-lived threads). */
static struct hak_heap *abandoned_take(void) {
    hak_spin_lock(&hak_heaps.lock);
    struct hak_heap *h = abandoned_pop();
    hak_spin_unlock(&hak_heaps.lock);
    return h;
}
static void abandoned_return(struct hak_heap *h, int was_scavenged) {
    hak_spin_lock(&hak_heaps.lock);
    abandoned_push_back(h, was_scavenged);
    hak_spin_unlock(&hak_heaps.lock);
}
/* The first warm abandoned heap (cold: the first scavenged one), taken
 * off the queue and locked (the caller holds its own heap's lock, so it
 * only try-locks: a thread borrowing from that heap may hold it for a
 * moment); *busy is set when the heap was locked and went back to the
 * queue. NULL when there is none. */
static struct hak_heap *take_first_locked(int cold, int *busy) {
    hak_spin_lock(&hak_heaps.lock);
    struct hak_heap *w = hak_heaps.warm_tail;
    struct hak_heap *h = cold ? (w ? w->next_abandoned : hak_heaps.abandoned) : (w ? hak_heaps.abandoned : NULL);
    if (h) unlink_after(cold ? w : NULL, h);
    *busy = h && !hak_spin_trylock(&h->lock);
    if (*busy) abandoned_push_back(h, h->scavenged);
    hak_spin_unlock(&hak_heaps.lock);
    return *busy ? NULL : h;
}
static void unlock_return(struct hak_heap *h, int was_scavenged) {
    hak_spin_unlock(&h->lock);
    abandoned_return(h, was_scavenged);
}

/* The oldest warm heap of the queue if it has waited a whole decay period,
 * taken off it; else, with_ss, the first scavenged one that still has
 * SuperSlabs (blocks alive elsewhere keep runs there); else NULL. Walks
 * the warm heaps (those abandoned about a period ago or less), and with_ss
 * the others too. */
static struct hak_heap *idle_pop(uint32_t now, uint32_t period, int with_ss) {
    struct hak_heap *oldest = hak_heaps.warm_tail, *prev = NULL, *h = hak_heaps.abandoned;
    if (oldest && (int32_t)(now - oldest->abandoned_ms) >= (int32_t)period) {
        for (; h != oldest; h = h->next_abandoned) prev = h;
        return unlink_after(prev, oldest);
    }
    if (!with_ss) return NULL;
    prev = oldest;
    for (h = oldest ? oldest->next_abandoned : hak_heaps.abandoned; h; prev = h, h = h->next_abandoned)
        if (h->ss_list) return unlink_after(prev, h);
    return NULL;
}

static struct hak_heap *idle_take_locked(int *busy, int with_ss) {
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    hak_spin_lock(&hak_heaps.lock);
    struct hak_heap *h = idle_pop(hak_os_clock_ms(), period, with_ss);
    *busy = h && !hak_spin_trylock(&h->lock);
    if (*busy) abandoned_push_front(h);
    hak_spin_unlock(&hak_heaps.lock);
    return *busy ? NULL : h;
}

/* For a decay tick, which looks after one abandoned heap: the oldest warm
 * one once it has waited a period, locked (NULL: none, or *busy when its
 * lock was taken; it then goes back to the head, where it is adopted
 * next). Never the head for its own sake: that is the heap a starting
 * thread adopts next, and moved behind the others it would make that
 * thread adopt an older one; heaps taking turns so would all stay in use
 * and none would wait the period that releases its runs (churn_threads:
 * 2 threads at a time, each starting its successor before it exits, need
 * 3 heaps, and a 4th kept warm in turn with them cost its peak RSS 0.5-1
 * MiB). */
struct hak_heap *hak_heap_abandoned_take_locked(int *busy) {
    return idle_take_locked(busy, 0);
}
/* After the tick's scavenge (of a heap that was warm). */
void hak_heap_abandoned_unlock_return(struct hak_heap *h) {
    unlock_return(h, 0);
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
 * thread kept (hak_heap_abandon), after which it is scavenged (it waits
 * behind the warm heaps); then SuperSlabs left with no run go back to the
 * pool, and with purge the pages of the free slabs of those that stay (a
 * block still alive elsewhere keeps them) go back at once: nobody uses
 * them, and the clock's idle purge, a few calls a tick over all heaps,
 * reaches them late (oversub_8 at exit: 1.4-4.6 MiB of them over 15-18
 * heaps; docs/PERFORMANCE.md, "Remote frees and idle heaps"). With the
 * clock off (period 0), the runs go at the first scavenge and nothing is
 * purged. */
static void scavenge(struct hak_heap *h, uint32_t now, uint32_t period, int purge) {
    int trim = 0;
    if (atomic_load_explicit(&h->inbox, memory_order_relaxed)) {
        hak_heap_drain_inbox(h, 0);
        trim = 1;
    }
    int idle = (int32_t)(now - h->abandoned_ms) >= (int32_t)period;
    if (idle) {
        hak_heap_release_empty_runs(h);
        h->scavenged = 1;
        trim = 1;
    }
    if (trim) hak_heap_trim(h);
    if (idle && period && purge) purge_free_slabs(h);
}
void hak_heap_scavenge_one(struct hak_heap *h, uint32_t now, uint32_t period) {
    scavenge(h, now, period, 1);
}

/* Every abandoned heap once, in turn: the warm ones (each goes back
 * behind the others, so that their order stays), then the scavenged. */
void hak_heap_scavenge_abandoned(void) {
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS), now = hak_os_clock_ms();
    for (int cold = 0; cold < 2; cold++) {
        hak_spin_lock(&hak_heaps.lock);
        size_t n = cold ? hak_heaps.nabandoned - hak_heaps.nwarm : hak_heaps.nwarm;
        hak_spin_unlock(&hak_heaps.lock);
        for (size_t i = 0; i < n; i++) {
            int busy;
            struct hak_heap *h = take_first_locked(cold, &busy);
            if (!h) {
                if (busy) continue;
                break;
            }
            int was = h->scavenged;
            hak_heap_scavenge_one(h, now, period);
            unlock_return(h, was);
        }
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
 * exited thread's heap that no thread adopted for a whole decay period
 * (the oldest warm one, else one already scavenged), with their partly
 * used runs: their free blocks are already resident, and only a thread
 * adopting that heap could use them otherwise. A heap abandoned more
 * recently is left alone: a thread about to start adopts it, runs and all
 * (hak_heap_abandon), and an emptied heap would make that thread build
 * new runs. The emptied heap stays queued for adoption, behind the warm
 * ones. Returns 1 if anything moved. */
int hak_heap_absorb_abandoned(struct hak_heap *h) {
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS), now = hak_os_clock_ms();
    if (!period) return 0;   /* no clock: the heap waits for a thread to adopt it */
    hak_spin_lock(&hak_heaps.lock);
    size_t n = hak_heaps.nabandoned;
    hak_spin_unlock(&hak_heaps.lock);
    for (size_t i = 0; i < n; i++) {
        int busy, moved;
        struct hak_heap *a = idle_take_locked(&busy, 1);
        if (!a) {
            if (busy) continue;
            return 0;
        }
        /* (it has waited a period) its empty runs and SuperSlabs go
         * first: moved, they would stay with h for good (nothing releases
         * a run with no block out that no free empties); its free slabs
         * stay resident, since h is about to place runs on them */
        int was = a->scavenged;
        scavenge(a, now, period, 0);
        moved = a->ss_list != NULL;
        while (a->ss_list) ss_move(a, h, a->ss_list);
        unlock_return(a, was);
        if (moved) return 1;
    }
    return 0;
}
