/* Blocks and SuperSlabs that move from one heap to another: a heap that
 * is about to take new memory first borrows free blocks from an idle heap
 * or takes over the SuperSlabs of an exited thread's heap nobody adopted.
 * The caller always holds its own heap's lock and only try-locks another
 * heap's. */
#include "backend/heap_int.h"
#include "os/os.h"
#include "base/options.h"

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
unsigned hak_heap_borrow(struct hak_heap *h, unsigned cls, struct hak_bin *bin, unsigned want) {
    uint32_t idle = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    if (!idle) return 0;   /* no clock, no idle heap */
    struct hak_heap *head = __atomic_load_n(&hak_heaps.all, __ATOMIC_ACQUIRE);
    if (head == h && !h->next_all) return 0;   /* the only heap */
    struct hak_heap *v = h->borrow_next ? h->borrow_next : head;
    uint64_t bit = (uint64_t)1 << (cls % 64);
    uint32_t now = hak_os_clock_ms();
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
            (int32_t)(now - atomic_load_explicit(&cur->active_ms, memory_order_relaxed)) < (int32_t)idle ||
            !hak_spin_trylock(&cur->lock))
            continue;
        hak_heap_drain_inbox(cur, 1);
        got = hak_heap_take_own(cur, cls, bin, want);
        if (!got) atomic_fetch_and_explicit(word, ~bit, memory_order_relaxed);
        hak_spin_unlock(&cur->lock);
    }
    h->borrow_next = v;
    h->st.borrowed_remote += got;
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
             * out that no free empties) */
            hak_heap_scavenge_one(a, now, period);
            moved = a->ss_list != NULL;
            while (a->ss_list) ss_move(a, h, a->ss_list);
        }
        hak_heap_abandoned_unlock_return(a);
        if (moved) return 1;
    }
    return 0;
}

