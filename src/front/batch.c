/* Batch refill and flush between a thread's bins and its heap. Moving half a
 * bin at a time means the heap (and the one CAS a remote free needs) is
 * touched once per batch, not once per call. */
#include "front/front.h"
#include "backend/heap.h"
#include "core/fastpath.h"

void *hak_cache_refill_pop(struct hak_tls *t, unsigned cls) {
    struct hak_bin *b = &t->bins[cls];
    unsigned want = b->max / 2;
    if (!hak_heap_refill(t->heap, cls, b, want ? want : 1)) return NULL;
    return hak_bin_pop(b, b->head);
}

void hak_cache_flush_push(struct hak_tls *t, void *p, unsigned cls) {
    struct hak_bin *b = &t->bins[cls];
    if (!b->room)
        hak_heap_flush(t->heap, b, hak_bin_count(b) - b->max / 2);
    hak_bin_push(b, p);
}

void hak_cache_flush_all(struct hak_tls *t) {
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++)
        if (t->bins[c].head) hak_heap_flush(t->heap, &t->bins[c], hak_bin_count(&t->bins[c]));
}
