/* A bin's blocks go back to their runs (own ones) or to their heaps'
 * inboxes (heap_remote.c). */
#include "backend/heap_int.h"
#include "base/options.h"

/* A flush hands a bin's blocks back to their runs a slab at a time: the
 * blocks of one slab that come one after the other in the bin (a program
 * frees in the order it allocated, or a bin refilled from one run) are
 * chained first and given to their run at once, so each block costs a
 * link and a compare, and the run's counts and state are seen once a
 * slab (docs/PERFORMANCE.md, "Runs").
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
        hak_run_put_noting(h, run->ss, hak_slab_of(run->ss, run->last), run->first, run->last, run->n, keep_empty, size);
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
        bin->head = hak_list_get(p);
        bin->room++;
        uintptr_t slab = (uintptr_t)p >> HAK_SLAB_SHIFT;
        if (slab == run.slab) {   /* h owns it: it owned the run's first, and holds its lock */
            hak_list_set(p, run.first);
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
