/* The malloc and free hit paths, inlined into every exported entry point.
 * A hit is: one size-class table load, one TLS bin access, a pop or a push.
 * No call, no lock, no atomic read-modify-write, no syscall, no function
 * pointer, no init check (see core/tls.h for why none is needed). Anything
 * else is a miss and leaves through a hak_*_slow function. */
#ifndef HAK_FASTPATH_H
#define HAK_FASTPATH_H

#include "core/tls.h"
#include "backend/chunk_map.h"
#include "backend/superslab.h"
#include "core/track.h"

void *hak_alloc_slow(size_t size);
void  hak_free_slow(void *p);

HAK_INLINE void *hak_alloc_inline(size_t size) {
    if (HAK_LIKELY(size <= HAK_TINY_MAX)) {
        struct hak_bin *b = &hak_tls.bins[hak_tiny_class(size)];
        void *p = b->head;
        if (HAK_LIKELY(p != NULL)) {
            b->head = hak_link_get(p);
            b->count--;
            return p;
        }
    }
    return hak_alloc_slow(size);
}

HAK_INLINE void hak_free_inline(void *p) {
    /* One unsigned compare selects SuperSlab entries without the checked
     * flag (see chunk_map.h). Slab tags are HAK_CLASS_INVALID for free slabs
     * and the header, whose bin has capacity 0: such a pointer falls to the
     * slow path and is checked there. */
    unsigned idx = hak_chunk_entry(p) - HAK_SS_ENTRY_BASE;
    if (HAK_LIKELY(idx < HAK_MAX_SS)) {
        struct hak_bin *b = &hak_tls.bins[hak_ss_tags[idx][hak_slab_index(p)]];
        if (HAK_LIKELY(b->count < b->max)) {
            hak_track_free(p);
            hak_link_set(p, b->head);
            b->head = p;
            b->count++;
            return;
        }
    }
    hak_free_slow(p);
}

#endif
