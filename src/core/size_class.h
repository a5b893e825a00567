/* Size classes: 16 B steps up to 128 B, then four classes per doubling up to
 * HAK_SMALL_MAX (256 KiB). Worst-case internal waste is 25% at a class
 * boundary, about 8% on average for uniformly random sizes. Requests above
 * HAK_SMALL_MAX go to the large path. */
#ifndef HAK_SIZE_CLASS_H
#define HAK_SIZE_CLASS_H

#include "core/common.h"

#define HAK_TINY_MAX     1024u                 /* front cache range */
#define HAK_SMALL_MAX    ((size_t)256 << 10)   /* SuperSlab range   */
#define HAK_NCLASS       52                    /* real classes      */
#define HAK_CLASS_INVALID HAK_NCLASS           /* tag of slabs not in use */
#define HAK_NBINS        (HAK_NCLASS + 1)
#define HAK_TINY_NCLASS  20                    /* classes <= 1 KiB  */

HAK_DATA const uint32_t hak_class_size[HAK_NCLASS];
/* Divisibility magic for the free path's block-start check: an offset n
 * (< 2^32) from the run start is a multiple of the class size d exactly when
 * n * M < M, with M = floor((2^64 - 1) / d) + 1 (Lemire et al.). Classes up
 * to 4 KiB have single-slab runs, so the offset is the pointer's low 16 bits.
 * Larger classes and HAK_CLASS_INVALID get 0, which always fails: their
 * frees are checked in full on the slow path. */
HAK_DATA uint64_t hak_class_start_magic[HAK_NBINS];
/* The same magic for every class, for offsets from a run's first slab. */
HAK_DATA uint64_t hak_class_run_magic[HAK_NCLASS];
void hak_size_class_init(void);
HAK_DATA const uint8_t  hak_tiny_class_index[(HAK_TINY_MAX >> 4) + 1];

/* Class of a request of n bytes, n <= HAK_TINY_MAX: one table load. */
HAK_INLINE unsigned hak_tiny_class(size_t n) {
    return hak_tiny_class_index[(n + 15) >> 4];
}

/* Class of HAK_TINY_MAX < n <= HAK_SMALL_MAX: four classes per power of
 * two above 1 KiB (1280, 1536, 1792, 2048, ...), a few ALU operations. */
HAK_INLINE unsigned hak_mid_class(size_t n) {
    size_t m = n - 1;
    unsigned lg = 63u - (unsigned)__builtin_clzl(m);          /* 2^lg <= m < 2^(lg+1) */
    unsigned quarter = (unsigned)((m >> (lg - 2)) & 3u);     /* which quarter of it */
    return HAK_TINY_NCLASS + (lg - 10) * 4 + quarter;
}

/* Class of any n <= HAK_SMALL_MAX. */
static inline unsigned hak_class_of(size_t n) {
    return n <= HAK_TINY_MAX ? hak_tiny_class(n) : hak_mid_class(n);
}

#endif
