/* The malloc and free hit paths, inlined into every exported entry point.
 * A hit is: one size-class table load, one TLS bin access, a pop or a push.
 * No call, no lock, no atomic read-modify-write, no syscall, no function
 * pointer, no init check (see core/tls.h for why none is needed). Anything
 * else is a miss and leaves through a hak_*_slow function.
 *
 * Bad frees: the free path checks that p is a block start of its class
 * (a multiply, see size_class.h; classes above 4 KiB, whose runs span
 * several slabs, in hak_free_multislab), and a freed small block carries a free
 * mark (the per-process random cookie in its third 32-bit word; malloc
 * clears it), so an interior pointer or a block that is already free leaves
 * the hit path, and the slow path finds out what it is (safety/badfree.c). */
#ifndef HAK_FASTPATH_H
#define HAK_FASTPATH_H

#include "core/tls.h"
#include "backend/chunk_map.h"
#include "backend/superslab.h"
#include "core/track.h"

void *hak_alloc_slow(size_t size);
void  hak_free_slow(void *p);
void  hak_free_multislab(void *p);

HAK_DATA uint32_t hak_free_cookie;

HAK_INLINE uint32_t *hak_free_mark(void *p) { return (uint32_t *)p + 2; }

HAK_INLINE void *hak_bin_pop(struct hak_bin *b, void *p) {
    b->head = hak_link_get(p);
    b->room++;
    hak_mark_clear(hak_free_mark(p));
    return p;
}

/* A small block stops being the program's: mark it free (and tell memcheck). */
HAK_INLINE void hak_block_freed(void *p) {
    *hak_free_mark(p) = hak_free_cookie;
    hak_track_free(p);
}

HAK_INLINE void hak_bin_push(struct hak_bin *b, void *p) {
    hak_block_freed(p);
    hak_link_set(p, b->head);
    b->head = p;
    b->room--;
}

HAK_INLINE void *hak_alloc_inline(size_t size) {
    unsigned cls;
    if (HAK_LIKELY(size <= HAK_TINY_MAX)) cls = hak_tiny_class(size);
    else if (size <= HAK_SMALL_MAX) cls = hak_mid_class(size);   /* Pool TLS bins */
    else return hak_alloc_slow(size);
    struct hak_bin *b = &hak_tls.bins[cls];
    void *p = b->head;
    if (HAK_LIKELY(p != NULL)) return hak_bin_pop(b, p);
    return hak_alloc_slow(size);
}

HAK_INLINE void hak_free_inline(void *p) {
    /* One unsigned compare selects SuperSlab entries without the checked
     * flag (see chunk_map.h). Slab tags are HAK_CLASS_INVALID for free slabs
     * and the header, whose bin has no room: such a pointer falls to the
     * slow path and is checked there. */
    unsigned idx = hak_chunk_entry(p) - HAK_SS_ENTRY_BASE;
    if (HAK_LIKELY(idx < HAK_MAX_SS)) {
        unsigned cls = hak_ss_tags[idx][hak_slab_index(p)];
        struct hak_bin *b = &hak_tls.bins[cls];
        uint64_t magic = hak_class_start_magic[cls];
        if (HAK_LIKELY((uint64_t)(uint16_t)(uintptr_t)p * magic < magic && b->room != 0 &&
                       hak_mark_read(hak_free_mark(p)) != hak_free_cookie)) {
            hak_bin_push(b, p);
            return;
        }
        hak_free_multislab(p);   /* classes above 4 KiB, or a miss */
        return;
    }
    hak_free_slow(p);
}

#endif
