/* Memory-checker annotations (-Dvalgrind=enabled) and free-list link access.
 *
 * A free block stores the link to the next free block in its first word,
 * and that word carries the free mark: the link is stored XORed with
 * HAK_LINK_TAG, whose top 16 bits are HAK_FREE_TAG. A block's address is
 * below 2^48 (Linux maps user space below 2^47 unless asked for more, and
 * hakmem never asks), so every free block's first word has HAK_FREE_TAG in
 * its top 16 bits, whichever list (bin, run, inbox) holds it. One word for
 * both is what makes it cheap: free writes one word of a block that is
 * usually not in the cache, and malloc reads and clears that same word. A
 * mark in a word of its own (the third) would make each of them touch a
 * second word of a line still on its way (docs/PERFORMANCE.md, "The free
 * mark"). A
 * program that writes into a freed block's first word (a use after free)
 * breaks the list there, as in any allocator that links free blocks
 * through them; but zero, a pointer or a small number there
 * now decodes to a non-canonical address, so the pop after the one that
 * takes the block faults at once, where a plain link would have cut the
 * list short or handed out whatever the program wrote.
 * With valgrind support, hakmem tells memcheck which ranges are live blocks
 * (MALLOCLIKE/FREELIKE/RESIZEINPLACE, at the size the program asked for,
 * the rest of the block no-access: api/api.c) and keeps free blocks no-access, so
 * memcheck reports leaks, use after free and overflows in the program; the
 * allocator opens a link word only for the instant it reads or writes it.
 * Without valgrind support every macro here is nothing and a link access is
 * a plain load or store. */
#ifndef HAK_TRACK_H
#define HAK_TRACK_H

#include "base/common.h"

/* A constant, not a secret: the mark only decides whether free takes the
 * slow path, which confirms a double free by finding the block on a free
 * list, so a program that happens to store HAK_FREE_TAG in the top bits of
 * a live block's first word costs itself a slow free, nothing else. */
#define HAK_FREE_TAG 0xF4EEu
#define HAK_LINK_TAG ((uintptr_t)HAK_FREE_TAG << 48)
_Static_assert(sizeof(uintptr_t) == 8, "the free mark is the top 16 bits of a 64-bit link");

/* a block's first word, and the half of it where the tag sits, read and
 * written through types that may alias the program's data */
typedef uintptr_t __attribute__((may_alias)) hak_link_word;
typedef uint16_t __attribute__((may_alias)) hak_tag_half;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HAK_TAG_OFFSET 6
#else
#define HAK_TAG_OFFSET 0
#endif
HAK_INLINE hak_tag_half *hak_tag_of(const void *blk) {
    return (hak_tag_half *)((uintptr_t)blk + HAK_TAG_OFFSET);
}

#if HAVE_VALGRIND
#include <valgrind/memcheck.h>

/* The size the program asked for of each live block, kept while memcheck
 * runs (base/track_sizes.c): memcheck is told the block is that long and
 * the rest of its class no-access. hak_track_sizes_on is set at init, when
 * running under valgrind; off it, these keep nothing and find nothing. */
extern int hak_track_sizes_on;
void hak_track_sizes_init(void);
void hak_track_size_set(const void *p, size_t size);
size_t hak_track_size_get(const void *p);   /* SIZE_MAX: not known */
void hak_track_size_drop(const void *p);
void hak_track_fork_prepare(void);
void hak_track_fork_release(void);

/* What the program may use of block p: its request when known, else usable. */
HAK_INLINE size_t hak_track_usable(const void *p, size_t usable) {
    size_t asked = hak_track_size_get(p);
    return asked < usable ? asked : usable;
}
#define hak_track_free(p) \
    do { hak_track_size_drop(p); VALGRIND_FREELIKE_BLOCK((p), 0); } while (0)
#define hak_track_resize(p, old, new)    VALGRIND_RESIZEINPLACE_BLOCK((p), (old), (new), 0)
#define hak_track_noaccess(p, n)         VALGRIND_MAKE_MEM_NOACCESS((p), (n))
/* hakmem's own metadata written where a freed block was */
#define hak_track_reuse(p, n)            VALGRIND_MAKE_MEM_UNDEFINED((p), (n))

/* malloc clears a block's link word (its free mark with it) just before
 * the block is handed out (and described to memcheck) */
HAK_INLINE void hak_mark_clear(void *blk) {
    VALGRIND_MAKE_MEM_UNDEFINED(blk, sizeof(hak_link_word));
    *(hak_link_word *)blk = 0;
}
/* free reads the mark of a block the program may never have written: that
 * is the allocator's business, not an uninitialised read by the program.
 * A block already freed stays no-access, so memcheck still sees that. */
HAK_INLINE int hak_mark_is_set(const void *blk) {
    /* a live block's mark may lie past its request, in no-access slack */
    if (hak_track_sizes_on && hak_track_size_get(blk) != SIZE_MAX) return 0;
    VALGRIND_MAKE_MEM_DEFINED_IF_ADDRESSABLE(hak_tag_of(blk), sizeof(hak_tag_half));
    return *hak_tag_of(blk) == HAK_FREE_TAG;
}
/* a word of hakmem's own in a free block other than its link (the
 * chain word of backend/heap_remote.c), read and written like the link */
HAK_INLINE uint32_t hak_word_get(uint32_t *w) {
    VALGRIND_MAKE_MEM_DEFINED(w, sizeof *w);
    uint32_t v = *w;
    VALGRIND_MAKE_MEM_NOACCESS(w, sizeof *w);
    return v;
}
HAK_INLINE void hak_word_put(uint32_t *w, uint32_t v) {
    VALGRIND_MAKE_MEM_UNDEFINED(w, sizeof *w);
    *w = v;
    VALGRIND_MAKE_MEM_NOACCESS(w, sizeof *w);
}
HAK_INLINE void *hak_link_get(void *blk) {
    VALGRIND_MAKE_MEM_DEFINED(blk, sizeof(hak_link_word));
    uintptr_t w = *(hak_link_word *)blk;
    VALGRIND_MAKE_MEM_NOACCESS(blk, sizeof(hak_link_word));
    return (void *)(w ^ HAK_LINK_TAG);
}
HAK_INLINE void hak_link_set(void *blk, void *next) {
    VALGRIND_MAKE_MEM_UNDEFINED(blk, sizeof(hak_link_word));
    *(hak_link_word *)blk = (uintptr_t)next ^ HAK_LINK_TAG;
    VALGRIND_MAKE_MEM_NOACCESS(blk, sizeof(hak_link_word));
}
#else
/* arguments are not evaluated: they may be calls that exist for memcheck only */
#define hak_track_sizes_init()           do { } while (0)
#define hak_track_free(p)                do { } while (0)
#define hak_track_usable(p, usable)      (usable)
#define hak_track_resize(p, old, new)    do { } while (0)
#define hak_track_noaccess(p, n)         do { } while (0)
#define hak_track_reuse(p, n)            do { } while (0)
#define hak_track_fork_prepare()         do { } while (0)
#define hak_track_fork_release()         do { } while (0)

HAK_INLINE void hak_mark_clear(void *blk) { *(hak_link_word *)blk = 0; }
HAK_INLINE int hak_mark_is_set(const void *blk) { return *hak_tag_of(blk) == HAK_FREE_TAG; }
HAK_INLINE uint32_t hak_word_get(uint32_t *w) { return *w; }
HAK_INLINE void hak_word_put(uint32_t *w, uint32_t v) { *w = v; }
HAK_INLINE void *hak_link_get(void *blk) {
    return (void *)(*(hak_link_word *)blk ^ HAK_LINK_TAG);
}
HAK_INLINE void hak_link_set(void *blk, void *next) {
    *(hak_link_word *)blk = (uintptr_t)next ^ HAK_LINK_TAG;
}
#endif

#endif
