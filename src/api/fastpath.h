/* The malloc and free hit paths, inlined into every exported entry point.
 * A hit is: one size-class lookup (malloc: a table by size; free: the
 * slab's class tag), one TLS bin access, a pop or a push.
 * No call, no lock, no atomic read-modify-write, no syscall, no function
 * pointer, no init check (see base/tls.h for why none is needed). Anything
 * else is a miss and leaves through a hak_*_slow or hak_free_miss function.
 *
 * Bad frees: the free path checks that p is a block start of its class
 * (a multiply, see size_class.h; classes above 64 KiB, whose blocks span
 * several slabs, in hak_free_miss), and a freed small block carries the free
 * mark (HAK_FREE_TAG in the top bits of its link word, base/track.h; malloc
 * clears the word), so an interior pointer or a block that is already free
 * leaves the hit path, and the slow path finds out what it is
 * (safety/badfree.c). */
#ifndef HAK_FASTPATH_H
#define HAK_FASTPATH_H

#include "base/tls.h"
#include "base/bin.h"
#include "backend/chunk_map.h"
#include "backend/superslab.h"
#include "base/track.h"

void *hak_alloc_slow(size_t size);
void  hak_free_slow(void *p);
void  hak_free_miss(void *p, uintptr_t tag);

/* The hit paths' own pop and push, on a bin reached through the thread's
 * segment (see base/tls.h); they do what hak_bin_pop and hak_bin_push
 * (base/bin.h) do. */
HAK_INLINE void *hak_fast_pop(hak_fast_bin *b, void *p) {
    b->head = hak_link_get(p);
    b->room++;
    hak_mark_clear(p);
    return p;
}

/* Takes one block's room in a bin: 1 if it had some, 0 (bin unchanged) if
 * it was full. Written as "decrement, then test the sign" because compilers
 * turn that into a decrement of the field in memory and a branch on its
 * sign (two instructions, no load into a register); the full case puts the
 * field back on its cold path. room never exceeds INT32_MAX. */
HAK_INLINE int hak_fast_take_room(hak_fast_bin *b) {
    int32_t left = (int32_t)b->room - 1;
    b->room = (uint32_t)left;
    if (HAK_UNLIKELY(left < 0)) {
        b->room = 0;
        return 0;
    }
    return 1;
}

/* The bin at byte offset `at` (a class times HAK_TAG_SCALE) of the
 * thread's bins. */
HAK_INLINE hak_fast_bin *hak_fast_bin_at(uintptr_t at) {
    return (hak_fast_bin *)((uintptr_t)hak_fast_bins() + at);
}

/* free's hit, once hak_fast_take_room said b has room for p. */
HAK_INLINE void hak_fast_push(hak_fast_bin *b, void *p) {
    hak_block_freed(p);
    hak_link_set(p, b->head);
    b->head = p;
}

/* malloc's hit: the head of bin b, popped, or NULL when b is empty. */
HAK_INLINE void *hak_fast_take(hak_fast_bin *b) {
    void *p = b->head;
    return HAK_LIKELY(p != NULL) ? hak_fast_pop(b, p) : NULL;
}

HAK_INLINE void *hak_alloc_inline(size_t size) {
    hak_fast_bin *b;
    if (HAK_LIKELY(size <= HAK_TINY_MAX)) {
        b = hak_fast_bin_at(hak_tiny_bin_of(size));   /* 0 -> empty bin 0 */
    } else if (size <= HAK_SMALL_MAX) {
        b = hak_fast_bin_at(hak_mid_bin_of(size));    /* Pool TLS bins */
    } else {
        return hak_alloc_slow(size);
    }
    void *p = hak_fast_take(b);
    if (HAK_LIKELY(p != NULL)) return p;
    return hak_alloc_slow(size);
}

/* The hit path's test of a pointer: stores p's class tag in *at and
 * returns 1 when p is the start of a block of a single-slab class that is
 * not marked free, that is, a block the program may free or resize.
 * The tag comes from the tag window (backend/chunk_map.h): pointers
 * outside it, and every slab not in a run of a SuperSlab whose frees may
 * skip the safety box (free slabs, the header, large spans, foreign
 * memory, checked SuperSlabs), have HAK_CLASS_INVALID. That class's check
 * (mul = limit = 0) always fails, so such a pointer gets 0 and is checked
 * on a slow path. The hardened box keeps the tags and makes every row's
 * check fail instead (safety/hardened.c). */
/* The same test for a pointer whose tag is known. */
HAK_INLINE int hak_tag_live(const void *p, uintptr_t tag) {
    const struct hak_class_check *check =
        (const struct hak_class_check *)((const char *)hak_class_magic + tag);
    return (uint64_t)(uint16_t)(uintptr_t)p * check->mul < check->limit &&
           !hak_mark_is_set(p);
}

HAK_INLINE int hak_live_block(const void *p, uintptr_t *at) {
    /* the tag is the class's offset in the bins and in hak_class_magic,
     * both 16 bytes a class */
    _Static_assert(sizeof(struct hak_class_check) == HAK_TAG_SCALE &&
                   sizeof(struct hak_bin) == HAK_TAG_SCALE, "tag is a bin offset");
    *at = hak_window_tag(p);
    return hak_tag_live(p, *at);
}

HAK_INLINE void hak_free_inline(void *p) {
    uintptr_t at;
    int live = hak_live_block(p, &at);
    hak_fast_bin *b = hak_fast_bin_at(at);
    if (HAK_LIKELY(live && hak_fast_take_room(b))) {
        hak_fast_push(b, p);
        return;
    }
    hak_free_miss(p, at);   /* classes above 64 KiB, or a miss */
}

#endif
