/* Batch refill and flush between a thread's bins and its heap. Moving half a
 * bin at a time means the heap (and the one CAS a remote free needs) is
 * touched once per batch, not once per call. */
#include "front/front.h"
#include "backend/heap.h"
#include "backend/transfer.h"
#include "base/options.h"
#include "base/bin.h"
#include "base/link_guard.h"

uint32_t hak_bin_limit[HAK_NBINS];

void hak_cache_limits_init(int tiny, uint32_t (*capacity)(unsigned cls)) {
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++)
        if (hak_class_is_tiny(c) == tiny) hak_bin_limit[c] = capacity(c);
}

static uint32_t bin_start(unsigned cls) {
    return hak_bin_limit[cls] < HAK_BIN_START ? hak_bin_limit[cls] : HAK_BIN_START;
}

/* Every bin unprimed: empty, no room (front/front.h, HAK_SEND_HOME_MAX). */
void hak_cache_thread_init(struct hak_tls *t) {
    for (unsigned c = 0; c < HAK_NBINS; c++) {
        t->bins[c].room = t->bins[c].max = 0;
        t->sent_home[c] = 0;
    }
    /* bins[HAK_CLASS_INVALID] stays so: never a hit */
}

/* An unprimed bin gets its starting room. */
static void bin_prime(struct hak_bin *b, unsigned cls) {
    if (!b->max) b->room = b->max = bin_start(cls);
}

/* Doubles b's capacity, up to the class's limit; the new room is free. */
static void bin_grow(struct hak_bin *b, uint32_t lim) {
    if (b->max >= lim) return;
    uint32_t grown = b->max * 2 < lim ? b->max * 2 : lim;
    b->room += grown - b->max;
    b->max = grown;
}

/* Bins nobody popped since the last look go back to the heap, and start
 * small again: a thread keeps up to 32 KiB of each tiny class and 2 MiB
 * of each mid one, and a program that moves on to other sizes (a new
 * phase) or stops freeing a class left those blocks, and the runs they
 * pin, resident for good (fragment: 25 MiB in bins at the end). The heap
 * looks on misses, at each decay tick of the thread's heap and at each
 * step of its growth (its runs took another 1 MiB of slabs:
 * backend/heap_refill.c, count_growth): a phase that grows the heap for
 * other sizes gets the idle bins' blocks back in their runs (to be
 * reused, lent to smaller classes, hollowed or freed) while it grows, not
 * a decay period later, when its peak is past. A bin a loop uses has been
 * popped since the last step. A bin whose head is the one the last look
 * saw had no pop, or a push and pop of that very block only. */
/* Adds n to one of the heap's figures under its lock: hak_heap_snapshot
 * (malloc_stats, hak_stats_get) reads them under it from any thread, and
 * these counts are made outside the heap's own calls. */
static void heap_count(struct hak_heap *h, uint64_t *figure, uint64_t n) {
    hak_spin_lock(&h->lock);
    *figure += n;
    hak_spin_unlock(&h->lock);
}

static void count_refill(struct hak_heap *h, unsigned cls, unsigned got) {
    hak_spin_lock(&h->lock);
    h->st.refills++;
    h->st.refilled_blocks += got;
    h->st.class_refills[cls]++;
    hak_spin_unlock(&h->lock);
}

/* Bin c goes back if the last look saw the same head; the look is now. */
static void trim_if_idle(struct hak_tls *t, unsigned c) {
    struct hak_heap *h = t->heap;
    struct hak_bin *b = &t->bins[c];
    if (b->head && b->head == h->bin_mark[c]) {
        unsigned n = hak_bin_count(b);
        hak_heap_flush(h, b, n, 0);
        heap_count(h, &h->st.idle_bins, 1);
        heap_count(h, &h->st.idle_bin_blocks, n);
        b->room = b->max = bin_start(c);   /* empty now */
    }
    h->bin_mark[c] = b->head;
}

void hak_cache_trim_idle(struct hak_tls *t) {
    struct hak_heap *h = t->heap;
    int ticked = h->bins_seen_tick != h->st.decay_ticks;
    if (!ticked && h->bins_seen_growth == h->grow_steps) return;
    h->bins_seen_growth = h->grow_steps;
    if (ticked) {
        h->bins_seen_tick = h->st.decay_ticks;
        hak_xfer_send_idle(h, (uint32_t)hak_opt(HAK_OPT_DECAY_MS));
    }
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++) trim_if_idle(t, c);
}

void hak_cache_trim_mid(struct hak_tls *t, unsigned keep) {
    for (unsigned c = HAK_TINY_LAST + 1; c <= HAK_MID_LAST; c++)
        if (c != keep) trim_if_idle(t, c);
}

/* A thread's bin of a class a little larger than cls (one that stands in
 * for it, size_class.h) holding a free block, or NULL. */
static struct hak_bin *larger_bin_with_block(struct hak_tls *t, unsigned cls) {
    for (unsigned big = cls + 1; big < HAK_NCLASS && hak_class_size[big] <= 2 * hak_class_size[cls]; big++)
        if (hak_class_stands_in(big, cls) && t->bins[big].head) return &t->bins[big];
    return NULL;
}

/* A bin that grew past lim to hold what a refill gave it (a run's whole
 * free list, or a carve's last page: backend/heap_refill.c) goes back to
 * lim once it has handed those blocks out or flushed them; keep: blocks it
 * still holds. */
static void bin_shrink(struct hak_bin *b, uint32_t lim, uint32_t keep) {
    if (b->max <= lim) return;
    b->max = lim;
    b->room = lim - keep;
}

void *hak_cache_refill_pop(struct hak_tls *t, unsigned cls) {
    struct hak_bin *b = &t->bins[cls];
    t->refilled[cls / 64] |= (uint64_t)1 << (cls % 64);
    bin_prime(b, cls);
    bin_shrink(b, hak_bin_limit[cls], 0);   /* empty: a miss */
    bin_grow(b, hak_bin_limit[cls]);
    unsigned want = b->max / 2;
    struct hak_bin *spare = NULL;
    if (!hak_class_is_tiny(cls) && t->standins[cls] < HAK_STANDIN_MAX)
        spare = larger_bin_with_block(t, cls);
    void *p;
    unsigned got;
    if (hak_class_is_tiny(cls) && hak_xfer_waiting(cls) && (got = hak_xfer_take(cls, b)) != 0) {
        /* a batch another thread's bin gave up (backend/transfer.h) */
        count_refill(t->heap, cls, got);
        p = hak_bin_pop(b, b->head);
    } else if (hak_class_is_tiny(cls) && hak_xfer_larger_waiting(cls) &&
               !hak_heap_refill(t->heap, cls, b, want ? want : 1, 0) &&
               (got = hak_xfer_take_larger(cls, b)) != 0) {
        /* no free block of cls at hand: a larger class's waiting batch
         * (resident blocks) rather than new pages carved */
        count_refill(t->heap, cls, got);
        p = hak_bin_pop(b, b->head);
    } else if (b->head || hak_heap_refill(t->heap, cls, b, want ? want : 1, spare == NULL)) {
        p = hak_bin_pop(b, b->head);
    } else if (spare) {
        /* nothing of cls resident: rather than carve new pages, hand out
         * the larger block; it goes back to its own bin when freed */
        t->standins[cls]++;
        heap_count(t->heap, &t->heap->st.standin_blocks, 1);
        p = hak_bin_pop(spare, spare->head);
    } else {
        return NULL;
    }
    hak_cache_trim_idle(t);
    return p;
}

/* A full bin keeps half its blocks for the thread's next mallocs, unless
 * the thread has never taken blocks of that class from its heap: its
 * mallocs do not use the class (a consumer freeing what another thread
 * made), so it keeps none and sends them all back to their owners. */
void hak_cache_flush_push(struct hak_tls *t, void *p, unsigned cls) {
    struct hak_bin *b = &t->bins[cls];   /* full or unprimed: no room */
    if (HAK_UNLIKELY(!b->max)) {
        /* another heap's block goes home while the thread has not
         * malloc'ed the class (front/front.h, HAK_SEND_HOME_MAX) */
        if (t->sent_home[cls] < HAK_SEND_HOME_MAX && hak_ss_owner(hak_ss_of(p)) != t->heap) {
            t->sent_home[cls]++;
            hak_cache_free_to_heap(t, p);
            return;
        }
        bin_prime(b, cls);
    }
    bin_grow(b, hak_bin_limit[cls] < HAK_BIN_FREE_MAX ? hak_bin_limit[cls] : HAK_BIN_FREE_MAX);
    if (!b->room) {
        int mallocs_it = (t->refilled[cls / 64] >> (cls % 64)) & 1;
        uint32_t lim = b->max < hak_bin_limit[cls] ? b->max : hak_bin_limit[cls];
        uint32_t keep = mallocs_it ? lim / 2 : 0;
        unsigned n = hak_bin_count(b) - keep;
        /* a batch that starts with another heap's block waits for the next
         * thread that misses on the class (backend/transfer.h); the
         * thread's own blocks go back to their runs */
        unsigned foreign;
        if (hak_class_is_tiny(cls) && hak_ss_owner(hak_ss_of(b->head)) != t->heap &&
            hak_xfer_put(cls, b, n, t->heap, &foreign))
            heap_count(t->heap, &t->heap->st.remote_blocks, foreign);
        else
            hak_heap_flush(t->heap, b, n, 0);
        bin_shrink(b, lim, keep);
    }
    hak_bin_push(b, p);
    hak_cache_trim_idle(t);
}

void hak_cache_free_to_heap(struct hak_tls *t, void *p) {
    struct hak_bin one = { .head = p, .room = 0, .max = 1 };
    hak_block_freed(p);
    hak_list_set(p, NULL);   /* read back by the heap's flush */
    hak_heap_flush(t->heap, &one, 1, 0);
}

void hak_cache_flush_all(struct hak_tls *t, int keep_runs) {
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++)
        if (t->bins[c].head) hak_heap_flush(t->heap, &t->bins[c], hak_bin_count(&t->bins[c]), keep_runs);
}
