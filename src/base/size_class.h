/* Size classes: 16 B steps up to 256 B; the quarters to 1 KiB with 624
 * and 704 in place of 640, the multiples of 128 shifted a step (320, 400,
 * 448, 528, 624, 704, 784, 928, 1040); from 1 to 4 KiB an eighth past
 * each power of two and the quarters (1152, 1280, 1536, 1792, 2048, 2304,
 * 2560, 3072, ...); from 4 to 64 KiB a 32nd past each power of two and
 * the eighths (4224, 4608, 5120, ..., 8192, 8448, 9216, ...); and to
 * HAK_SMALL_MAX (256 KiB) an eighth past and the quarters. Internal waste:
 * under 16 B per block up to 256 B; above, at most an eighth plus 16 B
 * where the classes are the eighths and a quarter elsewhere, a 32nd just
 * past a power of two from 4 to 32 KiB. A program made of blocks of a few
 * sizes takes about glibc's memory when those sizes sit near a class
 * (docs/PERFORMANCE.md, "Size classes", has the figures).
 *
 * Why not eighths everywhere: each class is carved to its own highest
 * live count, so on a random mix of sizes the sum of those highs, what
 * stays resident, grows with the number of classes, and the stats report
 * (include/hakmem.h, HAK_STATS_MAX_CLASSES) has room for 96. The eighths
 * go where blocks are large enough for waste to be memory that counts (4
 * to 64 KiB). Below 1 KiB a random mix spreads over every class; from 1 to
 * 4 KiB strings and vectors grown by realloc pass through every class on
 * their way. A 32nd past the power of two catches its most common
 * neighbour, a power-of-two payload plus a small header (a database page
 * and its descriptor, a 4 KiB value and its length). 24 B stays in the
 * 32-byte class: every block is 16-byte aligned like glibc's, which
 * programs may rely on (C++'s __STDCPP_DEFAULT_NEW_ALIGNMENT__ is 16 on
 * x86-64), and glibc's chunk for 24 bytes is 32 as well.
 *
 * Why 400, 528, 624, 784, 928 and 1040 and not the multiples of 128:
 * a program mostly touches the first line of each block (a header, a
 * vtable, a key), and blocks start at k * size in every slab. At 1024 B
 * they start on only 4 of a page's 64 lines, so the first lines of all a
 * program's 1 KiB blocks compete for 4 of the L1's 64 sets (and 1/16 of
 * the L2's, whose low index bits are the line's place in its page); 512 B
 * on 8, 768 B on 16, 384, 640 and 896 B on 32. A size 16 or 32 bytes
 * past (16 short of 640) makes a slab's blocks start on 55 to 64 lines
 * (1040: 63, 528: 55), which gives random mixes what per-run cache
 * colours gave, without their cost on free (docs/PERFORMANCE.md, "Size
 * classes"). The cost: those classes' blocks are 16- or 32-aligned, not
 * naturally aligned, so aligned requests from 257 B to 1 KiB take the
 * quarters kept for them (HAK_ALIGNED_FIRST), and a request of exactly 512
 * or 1024 bytes gets 16 bytes more. Requests above HAK_SMALL_MAX go to the
 * large path.
 *
 * Class 0 is no class: it is the tag of slabs not in use (zero-filled
 * memory means "not a block"), and its bin never holds a block, so
 * malloc(0) (which rounds to class 0) and a free of such a slab's pointer
 * both leave the hit path. */
#ifndef HAK_SIZE_CLASS_H
#define HAK_SIZE_CLASS_H

#include "base/common.h"

#define HAK_TINY_MAX      1040u                 /* front cache range: up to the last tiny class */
#define HAK_FINE_MAX      256u                  /* 16 B steps up to here */
#define HAK_SMALL_MAX     ((size_t)256 << 10)   /* SuperSlab range   */
#define HAK_CLASS_INVALID 0u
#define HAK_CLASS_FIRST   1u
#define HAK_FINE_LAST     16u                   /* classes 1..16: 16..256 B */
#define HAK_TINY_LAST     25u                   /* classes 17..25: 320..1040 B */
#define HAK_MID_LAST      81u                   /* classes 26..81: 1152 B..256 KiB */
/* Classes 82..89: 320, 384, 448, 512, 640, 768, 896 and 1024 B, the
 * quarters from 256 B to 1 KiB. Aligned requests (memalign and the like,
 * alignment 32 B and up) of 257 B to 1 KiB take them, and only those:
 * they need a class whose size is a multiple of the alignment, and
 * without these, aligned_alloc(64, 512) took a 1,152-byte block and
 * memalign(512, 300) a 1,536-byte one (2-3x glibc's peak RSS on a program
 * made of such blocks; C++ gets them for every alignas(64) object).
 * malloc's tables never lead to them, and aligned requests never take
 * malloc's classes 17..28: so those need only 16-byte alignment, and any
 * larger class's free blocks may stand in for them (hak_class_stands_in). */
#define HAK_ALIGNED_FIRST 82u
#define HAK_NCLASS        90u                   /* 0, 25 tiny, 56 mid, 8 tiny for aligned requests
                                                 * (HAK_STATS_MAX_CLASSES, include/hakmem.h, is the most) */
#define HAK_NBINS         HAK_NCLASS

HAK_DATA const uint32_t hak_class_size[HAK_NCLASS];
/* The free path's block-start check, one multiply and one compare: an
 * offset n (< 2^32) is the start of one of the first `count` blocks of size
 * d laid from offset 0 exactly when n * mul (mod 2^64) < limit, with
 * mul = floor((2^64 - 1) / d) + 1 (Lemire et al.'s divisibility magic) and
 * limit = count * e, where e = mul * d - 2^64 is the rounding error
 * (limit = 1 when d is a power of two and e = 0). A multiple q * d gives
 * q * e, below the limit for q < count; any other n gives at least mul,
 * far above it. So the multiple of d just past the last block, which still
 * lies inside the slab or run when d does not divide its size, fails too.
 *
 * Blocks of most classes up to 64 KiB never cross a slab boundary, so
 * their offset is the pointer's low 16 bits and count is the blocks per
 * slab: hak_class_magic[cls] (backend/chunk_map.h, beside the other tables
 * the free path reads). Classes of whole pages laid end to end check "a
 * page start" there (d = 4 KiB), their pages without a block start being
 * tagged no class (backend/superslab.h, hak_size_page_starts). Other
 * classes laid end to end, larger classes and HAK_CLASS_INVALID have mul
 * = limit = 0 there, which always fails: their frees go to hak_free_miss,
 * which checks the offset from the run's start against
 * hak_class_run_check (backend/superslab.h). */
struct hak_class_check {
    uint64_t mul;
    uint64_t limit;
};
/* A class's tag (backend/chunk_map.h) and its bin's offset: the class
 * times this, sizeof(struct hak_bin) == sizeof(struct hak_class_check) */
#define HAK_TAG_SCALE 16u
/* The check accepting exactly offsets k * d, k < count. */
struct hak_class_check hak_class_check_make(uint32_t d, uint32_t count);
/* The class tables; the checks, which depend on how slabs hold blocks,
 * are made by hak_ss_class_checks_init (backend/superslab.h). */
void hak_size_class_init(void);

/* Class of HAK_FINE_MAX < n <= HAK_TINY_MAX: the first of the nine
 * classes above 256 B that holds it. Slow paths only (the hit path has a
 * table by size). */
HAK_INLINE unsigned hak_quarter_class(size_t n) {
    unsigned c = HAK_FINE_LAST + 1;
    while (hak_class_size[c] < n) c++;
    return c;
}

/* 1 for the classes the front cache box serves (the tiny ones, aligned
 * requests' included); 0 for mid classes, which the Pool TLS box serves. */
HAK_INLINE int hak_class_is_tiny(unsigned cls) {
    return cls <= HAK_TINY_LAST || cls >= HAK_ALIGNED_FIRST;
}

/* Class of HAK_TINY_MAX < n <= HAK_SMALL_MAX, from 1041 B up (lg >= 10):
 * from 1 KiB and from 2 KiB, an eighth past and the quarters (five); from
 * 4 KiB to 64 KiB, a 32nd past and the eighths
 * (nine); from 64 KiB, an eighth past and the quarters (five). */
HAK_INLINE unsigned hak_mid_class(size_t n) {
    size_t m = n - 1;
    unsigned lg = 63u - (unsigned)__builtin_clzl(m);
    unsigned eighth = (unsigned)((m >> (lg - 3)) & 7u);      /* which eighth of it */
    unsigned quarterly = eighth < 2 ? eighth : (eighth >> 1) + 1; /* 9/8, 10/8, then quarters */
    unsigned first = HAK_TINY_LAST + 1;
    if (lg < 12) return first + (lg - 10) * 5 + quarterly;
    if (lg < 16) return first + 10 + (lg - 12) * 9 + ((m >> (lg - 5) & 31u) ? eighth + 1 : 0);
    return first + 46 + (lg - 16) * 5 + quarterly;
}

/* Class of a request of n bytes, n <= HAK_TINY_MAX (0 for n == 0, which
 * is no class; hak_class_of handles it). Slow paths only. */
HAK_INLINE unsigned hak_tiny_class(size_t n) {
    return n <= HAK_FINE_MAX ? (unsigned)((n + 15) >> 4) : hak_quarter_class(n);
}

/* The hit path's way to a request's bin, a table of bin offsets (cls * 16)
 * filled at init, so that malloc runs the same few instructions for every
 * class: for tiny requests by the size itself (2 KiB, of which a program
 * touches the lines of the sizes it asks for); for mid ones by 128-byte
 * granule, as mid classes change only at multiples of 128 B. Before init
 * every entry is 0, the bin of no class, which is always empty: a miss. */
HAK_DATA uint16_t hak_tiny_bin_offset[HAK_TINY_MAX + 1];
HAK_INLINE size_t hak_tiny_bin_of(size_t n) {   /* n <= HAK_TINY_MAX */
    return hak_tiny_bin_offset[n];
}

#define HAK_MID_GRANULE_SHIFT 7
HAK_DATA uint16_t hak_mid_bin_offset[HAK_SMALL_MAX >> HAK_MID_GRANULE_SHIFT];
HAK_INLINE size_t hak_mid_bin_of(size_t n) {   /* HAK_TINY_MAX < n <= HAK_SMALL_MAX */
    return hak_mid_bin_offset[(n - 1) >> HAK_MID_GRANULE_SHIFT];
}

/* 1 when free blocks of class `big` may be handed out for class cls (see
 * refill_from_larger in backend/heap_refill.c): at most twice the size, and
 * aligned at least as well as an aligned request taking cls needs (a
 * class's blocks are aligned to the largest power of two dividing its
 * size, up to a slab, which memalign relies on; see alloc_aligned in
 * api/api.c). malloc's classes between 256 B and 1 KiB serve no aligned
 * request, so any class up to twice their size stands in for them: a
 * 400-byte block for a 320-byte one, a 528-byte one for 448: more free
 * blocks stand in, and fewer new pages are carved (docs/PERFORMANCE.md,
 * "Size classes"). */
static inline int hak_class_stands_in(unsigned big, unsigned cls) {
    uint32_t want = hak_class_size[cls], have = hak_class_size[big];
    uint32_t align = cls > HAK_FINE_LAST && cls <= HAK_TINY_LAST ? HAK_ALIGNMENT : want & -want;
    /* by size, not index: the classes kept for aligned requests come after
     * the mid ones but are smaller */
    return big > cls && have >= want && have <= 2 * want && (have & (align - 1)) == 0;
}

/* Aligned requests (memalign and the like) with 16 < align <= 64 KiB and
 * size <= HAK_SMALL_MAX: the class to serve them from, the smallest that
 * holds size and whose size is a multiple of align (see alloc_aligned in
 * api/api.c), looked up in tables filled at init rather than searched on
 * every call (two scans over the classes cost posix_memalign 1.4x its
 * time; docs/PERFORMANCE.md, "Size classes"). By log2 of the alignment and,
 * up to HAK_TINY_MAX, the size in 16-byte steps (the classes kept for
 * aligned requests fall between malloc's there), above it the size's
 * class. 0: not filled yet (before init); HAK_ALIGNED_NONE: no class fits,
 * a large span serves it. */
#define HAK_ALIGNED_LG_MIN 5u
#define HAK_ALIGNED_LG_MAX 16u
#define HAK_ALIGNED_NONE   0xFFu
HAK_DATA uint8_t hak_aligned_tiny[HAK_ALIGNED_LG_MAX - HAK_ALIGNED_LG_MIN + 1][(HAK_TINY_MAX >> 4) + 1];
HAK_DATA uint8_t hak_aligned_mid[HAK_ALIGNED_LG_MAX - HAK_ALIGNED_LG_MIN + 1][HAK_MID_LAST + 1];
/* The same answer by searching (slow paths: before init, and to fill the
 * tables). 0 when no class fits. */
unsigned hak_aligned_class_search(size_t size, size_t align);

/* align a power of two in (16, 64 KiB], size <= HAK_SMALL_MAX. */
HAK_INLINE unsigned hak_aligned_class(size_t size, size_t align) {
    unsigned row = (unsigned)__builtin_ctzl(align) - HAK_ALIGNED_LG_MIN;
    unsigned cls = size <= HAK_TINY_MAX
        ? hak_aligned_tiny[row][(size + 15) >> 4]
        : hak_aligned_mid[row][hak_mid_bin_of(size) / 16u];
    if (HAK_UNLIKELY(cls == 0)) cls = hak_aligned_class_search(size, align);
    return cls == HAK_ALIGNED_NONE ? 0 : cls;
}

/* Class of any n <= HAK_SMALL_MAX (malloc(0) gets the smallest block). */
static inline unsigned hak_class_of(size_t n) {
    if (n == 0) return HAK_CLASS_FIRST;
    return n <= HAK_TINY_MAX ? hak_tiny_class(n) : hak_mid_class(n);
}

#endif
