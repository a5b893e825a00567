/* The transfer cache (backend/transfer.h): per class, a short stack of
 * batches under a spin lock. Only misses come here; a batch moves in and
 * out whole (its first and last block, one link written), so the lock is
 * held for a few stores. */
#include "backend/transfer.h"
#include "backend/heap.h"
#include "base/link_guard.h"
#include "os/os.h"

/* Zero-filled (.bss, locks of kind HAK_LOCK_HEAP): only the rows of the
 * classes in use are ever touched, where an initialised table would be
 * file-backed data, all of it resident in every process. */
struct hak_xfer_class hak_xfer[HAK_NBINS];

_Atomic uint64_t hak_xfer_mask;

static uint32_t used_hint(const struct hak_xfer_class *x) {
    return atomic_load_explicit(&x->used, memory_order_relaxed);
}

/* Under x's lock: class cls's batches went from was to now. */
static void mask_update(unsigned cls, uint32_t was, uint32_t now) {
    if (cls >= 64 || !was == !now) return;
    uint64_t bit = (uint64_t)1 << cls;
    if (now) atomic_fetch_or_explicit(&hak_xfer_mask, bit, memory_order_relaxed);
    else atomic_fetch_and_explicit(&hak_xfer_mask, ~bit, memory_order_relaxed);
}

int hak_xfer_put(unsigned cls, struct hak_bin *b, unsigned n, const struct hak_heap *self, unsigned *foreign) {
    struct hak_xfer_class *x = &hak_xfer[cls];
    if (!n || !b->head || used_hint(x) >= HAK_XFER_SLOTS) return 0;
    /* cut the batch off the bin first: its links are the freeing thread's
     * own writes, in its cache, and the lock is not held meanwhile */
    void *first = b->head, *last = first;
    unsigned got = 1, others = hak_ss_owner(hak_ss_of(first)) != self;
    for (void *q = hak_list_get(last); got < n && q; q = hak_list_get(last)) {
        last = q;
        got++;
        others += hak_ss_owner(hak_ss_of(q)) != self;
    }
    hak_spin_lock(&x->lock);
    uint32_t u = atomic_load_explicit(&x->used, memory_order_relaxed);
    if (u >= HAK_XFER_SLOTS) {
        hak_spin_unlock(&x->lock);
        return 0;
    }
    b->head = hak_list_get(last);
    hak_list_set(last, NULL);
    b->room += got;
    x->b[u] = (struct hak_xfer_batch){ first, last, got, hak_os_clock_ms() };
    atomic_store_explicit(&x->used, u + 1, memory_order_relaxed);
    mask_update(cls, u, u + 1);
    hak_spin_unlock(&x->lock);
    *foreign = others;
    return 1;
}

unsigned hak_xfer_take(unsigned cls, struct hak_bin *b) {
    struct hak_xfer_class *x = &hak_xfer[cls];
    if (!used_hint(x)) return 0;
    hak_spin_lock(&x->lock);
    uint32_t u = atomic_load_explicit(&x->used, memory_order_relaxed);
    if (!u) {
        hak_spin_unlock(&x->lock);
        return 0;
    }
    struct hak_xfer_batch t = x->b[u - 1];   /* the newest: its lines are the likeliest still cached */
    atomic_store_explicit(&x->used, u - 1, memory_order_relaxed);
    mask_update(cls, u, u - 1);
    hak_spin_unlock(&x->lock);
    hak_list_set(t.last, b->head);
    b->head = t.first;
    if (t.n > b->room) {   /* a batch of a deeper bin: this one grows to hold it */
        b->max += t.n - b->room;
        b->room = t.n;
    }
    b->room -= t.n;
    return t.n;
}

unsigned hak_xfer_take_larger(unsigned cls, struct hak_bin *b) {
    unsigned got = 0;
    for (unsigned big = cls + 1; !got && big < HAK_NCLASS && hak_class_size[big] <= 2 * hak_class_size[cls]; big++)
        if (hak_class_stands_in(big, cls)) got = hak_xfer_take(big, b);
    return got;
}

void hak_xfer_send_idle(struct hak_heap *h, uint32_t period) {
    uint32_t now = hak_os_clock_ms();
    for (unsigned c = 0; c < HAK_NBINS; c++) {
        struct hak_xfer_class *x = &hak_xfer[c];
        if (!used_hint(x)) continue;
        struct hak_xfer_batch gone[HAK_XFER_SLOTS];
        unsigned k = 0;
        hak_spin_lock(&x->lock);
        uint32_t u = atomic_load_explicit(&x->used, memory_order_relaxed);
        while (k < u && (period == 0 || (int32_t)(now - x->b[k].put_ms) >= (int32_t)period)) {
            gone[k] = x->b[k];
            k++;
        }
        for (unsigned i = k; i < u; i++) x->b[i - k] = x->b[i];
        atomic_store_explicit(&x->used, u - k, memory_order_relaxed);
        mask_update(c, u, u - k);
        hak_spin_unlock(&x->lock);
        for (unsigned i = 0; i < k; i++) {
            struct hak_bin one = { .head = gone[i].first, .room = 0, .max = gone[i].n };
            hak_heap_flush(h, &one, gone[i].n, 0);
        }
    }
}

int hak_xfer_holds(const void *p, unsigned cls) {
    struct hak_xfer_class *x = &hak_xfer[cls];
    if (!used_hint(x)) return 0;
    int found = 0;
    hak_spin_lock(&x->lock);
    uint32_t u = atomic_load_explicit(&x->used, memory_order_relaxed);
    for (unsigned i = 0; i < u && !found; i++) {
        void *q = x->b[i].first;
        for (uint32_t k = 0; k < x->b[i].n && q && !found; k++, q = hak_list_get(q))
            found = q == p;
    }
    hak_spin_unlock(&x->lock);
    return found;
}

void hak_xfer_fork_prepare(void) {
    for (unsigned c = 0; c < HAK_NBINS; c++) hak_spin_fork_take(&hak_xfer[c].lock);
}
void hak_xfer_fork_parent(void) {
    for (unsigned c = 0; c < HAK_NBINS; c++) hak_spin_fork_release(&hak_xfer[c].lock);
}
void hak_xfer_fork_child(void) { hak_xfer_fork_parent(); }
