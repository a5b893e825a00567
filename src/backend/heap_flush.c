/* A bin's blocks go back to their runs (own ones) or to their heaps'
 * inboxes (heap_remote.c). */
#include "backend/heap_int.h"
#include "base/options.h"

/* A flush hands a bin's blocks back to their runs a stretch at a time: the
 * blocks of one slab that come one after the other in the bin (a program
 * frees in the order it allocated, or a bin refilled from one run) go to
 * their run at once, as the bin links them, so each of them costs a load
 * and a compare, and the run's counts and state are seen once a stretch
 * (docs/PERFORMANCE.md, "Runs").
 * A program that frees in another order than it allocated (a tree freed in
 * post-order, a random mix) makes stretches of one block: a flush of 128
 * 48-byte blocks touched 60-70 slabs. So a stretch's own cost is kept
 * small too: a run that stays partly used (or is its class's current run) takes the
 * stretch inline with no other test than hak_heap_hollow_consider's, and
 * the counts that do not depend on the run are kept once a flush; the rest
 * (a run that empties or was full) is put_settle's. With plain links (every
 * box but hardened) the loop reads and writes them without the keyed
 * branch: 69 -> 28 instructions a block for the tree (callgrind, `tree
 * 100000 3 100000 42`).
 * Blocks of SuperSlabs other heaps own go to those heaps' inboxes, one
 * push an owner (hak_send_add, heap_remote.c). */

/* A stretch of run s whose put may change the run's state (it empties, or
 * was full): hak_run_put decides, and what it keeps is offered to the
 * hollow queue. Out of line: rare, and its registers would cost the loop. */
static HAK_NOINLINE void put_settle(struct hak_heap *h, struct hak_slab *s, void *first, void *last, unsigned n,
                                    int keep_empty) {
    struct hak_slab *r = hak_run_put(h, hak_ss_of_slab(s), s, first, last, n, keep_empty);
    if (r) hak_heap_hollow_consider(h, r);
}

/* Gives a stretch of n blocks of run s, chained from first to last, back
 * to it. */
HAK_INLINE void put_stretch(struct hak_heap *h, struct hak_slab *s, void *first, void *last, unsigned n,
                           int keep_empty, int keyed) {
    unsigned st = s->state;
    if (HAK_LIKELY(st == HAK_SLAB_CURRENT || (st == HAK_SLAB_PARTIAL && s->used != n))) {
        if (keyed) hak_list_set(last, s->free);
        else hak_link_set(last, s->free);
        s->free = first;
        s->nfree += n;
        s->used -= n;
        if (st == HAK_SLAB_PARTIAL) hak_heap_hollow_consider(h, s);
        return;
    }
    put_settle(h, s, first, last, n, keep_empty);
}

/* The flush's loop; keyed is a constant in each of its two copies (links
 * stored with the hardened box's key, or plain). The blocks of a stretch
 * already follow each other in the bin, linked in that order, so the
 * stretch goes back as it is, its last block linked to its run's list: a
 * block inside a stretch costs a load and a compare. A block of the last
 * remote block's slab joins that block's send stretch with no look at
 * its owner (a call for every remote block cost producer_consumer 2%).
 * Returns the blocks that went to other heaps. */
HAK_INLINE unsigned flush_blocks(struct hak_heap *h, struct hak_bin *bin, unsigned n, int keep_empty, int keyed) {
    struct hak_send send;
    send.used = send.evict = 0;
    send.last = NULL;
    struct hak_slab *s = NULL;             /* the open stretch's run ... */
    uintptr_t slab = 0;                    /* ... its slab (address >> HAK_SLAB_SHIFT; 0: none) */
    uintptr_t rslab = 0;                   /* the last remote block's slab (0: none) */
    void *first = NULL, *last = NULL;
    unsigned len = 0, remote = 0, i = 0;
    void *p = bin->head;
    for (; i < n && p; i++) {
        void *next = keyed ? hak_list_get(p) : hak_link_get(p);
        uintptr_t at = (uintptr_t)p >> HAK_SLAB_SHIFT;
        if (at == slab) {   /* h owns it: it owned the stretch's first, and holds its lock */
            last = p;
            len++;
            p = next;
            continue;
        }
        if (len) put_stretch(h, s, first, last, len, keep_empty, keyed);
        len = 0;
        slab = 0;
        if (at == rslab) {   /* the last remote block's slab: its stretch, its owner */
            hak_send_prepend(&send, send.last, p);
            remote++;
            p = next;
            continue;
        }
        struct hak_superslab *ss = hak_ss_of(p);
        struct hak_heap *owner = hak_ss_owner(ss);
        if (HAK_UNLIKELY(owner != h)) {
            hak_send_add(h, &send, p, at, owner);
            rslab = at;
            remote++;
            p = next;
            continue;
        }
        s = hak_slab_of(ss, p);
        slab = at;
        first = last = p;
        len = 1;
        p = next;
    }
    if (len) put_stretch(h, s, first, last, len, keep_empty, keyed);
    bin->head = p;
    bin->room += i;
    if (send.used) hak_send_all(h, &send);
    h->st.remote_blocks += remote;
    return i - remote;
}

static void flush(struct hak_heap *h, struct hak_bin *bin, unsigned n, int keep_empty) {
    /* a bin's blocks are of its class's size, but for a larger class's
     * blocks a refill lent it: dropped_bytes is an estimate anyway */
    size_t size = bin->head ? hak_slab_of(hak_ss_of(bin->head), bin->head)->block_size : 0;
    hak_heap_decay(h);
    h->st.flushes++;
    h->st.flushed_blocks += n;
    unsigned own = HAK_UNLIKELY(hak_link_key) ? flush_blocks(h, bin, n, keep_empty, 1)
                                              : flush_blocks(h, bin, n, keep_empty, 0);
    h->dropped_bytes += (size_t)own * size;
}

void hak_heap_flush(struct hak_heap *h, struct hak_bin *bin, unsigned n, int keep_empty) {
    hak_spin_lock(&h->lock);
    flush(h, bin, n, keep_empty);
    hak_spin_unlock(&h->lock);
}
