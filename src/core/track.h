/* Memory-checker annotations (-Dvalgrind=enabled) and free-list link access.
 *
 * A free block stores the link to the next free block in its first word.
 * With valgrind support, hakmem tells memcheck which ranges are live blocks
 * (MALLOCLIKE/FREELIKE/RESIZEINPLACE) and keeps free blocks no-access, so
 * memcheck reports leaks, use after free and overflows in the program; the
 * allocator opens a link word only for the instant it reads or writes it.
 * Without valgrind support every macro here is nothing and a link access is
 * a plain load or store. */
#ifndef HAK_TRACK_H
#define HAK_TRACK_H

#include "core/common.h"

#if HAVE_VALGRIND
#include <valgrind/memcheck.h>

#define hak_track_alloc(p, size, zeroed) \
    do { if (p) VALGRIND_MALLOCLIKE_BLOCK((p), (size), 0, (zeroed)); } while (0)
#define hak_track_free(p)                VALGRIND_FREELIKE_BLOCK((p), 0)
#define hak_track_resize(p, old, new)    VALGRIND_RESIZEINPLACE_BLOCK((p), (old), (new), 0)
#define hak_track_noaccess(p, n)         VALGRIND_MAKE_MEM_NOACCESS((p), (n))
/* hakmem's own metadata written where a freed block was */
#define hak_track_reuse(p, n)            VALGRIND_MAKE_MEM_UNDEFINED((p), (n))

/* malloc clears a block's free mark just before the block is handed out
 * (and described to memcheck) */
HAK_INLINE void hak_mark_clear(uint32_t *mark) {
    VALGRIND_MAKE_MEM_UNDEFINED(mark, sizeof *mark);
    *mark = 0;
}
/* free reads the mark of a block the program may never have written: that
 * is the allocator's business, not an uninitialised read by the program.
 * A block already freed stays no-access, so memcheck still sees that. */
HAK_INLINE uint32_t hak_mark_read(const uint32_t *mark) {
    VALGRIND_MAKE_MEM_DEFINED_IF_ADDRESSABLE(mark, sizeof *mark);
    return *mark;
}
/* a block the allocator keeps free gets its mark back without being
 * opened to the program */
HAK_INLINE void hak_mark_put(uint32_t *mark, uint32_t value) {
    VALGRIND_MAKE_MEM_UNDEFINED(mark, sizeof *mark);
    *mark = value;
    VALGRIND_MAKE_MEM_NOACCESS(mark, sizeof *mark);
}
/* a word of hakmem's own in a free block other than its link (the
 * chain word of backend/heap_remote.c), read and written like the link */
HAK_INLINE uint32_t hak_word_get(uint32_t *w) {
    VALGRIND_MAKE_MEM_DEFINED(w, sizeof *w);
    uint32_t v = *w;
    VALGRIND_MAKE_MEM_NOACCESS(w, sizeof *w);
    return v;
}
HAK_INLINE void hak_word_put(uint32_t *w, uint32_t v) { hak_mark_put(w, v); }
HAK_INLINE void *hak_link_get(void *blk) {
    VALGRIND_MAKE_MEM_DEFINED(blk, sizeof(void *));
    void *next = *(void **)blk;
    VALGRIND_MAKE_MEM_NOACCESS(blk, sizeof(void *));
    return next;
}
HAK_INLINE void hak_link_set(void *blk, void *next) {
    VALGRIND_MAKE_MEM_UNDEFINED(blk, sizeof(void *));
    *(void **)blk = next;
    VALGRIND_MAKE_MEM_NOACCESS(blk, sizeof(void *));
}
#else
/* arguments are not evaluated: they may be calls that exist for memcheck only */
#define hak_track_alloc(p, size, zeroed) do { } while (0)
#define hak_track_free(p)                do { } while (0)
#define hak_track_resize(p, old, new)    do { } while (0)
#define hak_track_noaccess(p, n)         do { } while (0)
#define hak_track_reuse(p, n)            do { } while (0)

HAK_INLINE void hak_mark_clear(uint32_t *mark) { *mark = 0; }
HAK_INLINE void hak_mark_put(uint32_t *mark, uint32_t value) { *mark = value; }
HAK_INLINE uint32_t hak_mark_read(const uint32_t *mark) { return *mark; }
HAK_INLINE uint32_t hak_word_get(uint32_t *w) { return *w; }
HAK_INLINE void hak_word_put(uint32_t *w, uint32_t v) { *w = v; }
HAK_INLINE void *hak_link_get(void *blk) { return *(void **)blk; }
HAK_INLINE void hak_link_set(void *blk, void *next) { *(void **)blk = next; }
#endif

#endif
