/* The chunk map: one 16-bit entry per 2 MiB chunk of the 47-bit user
 * address space (128 MiB of zero-fill-on-demand .bss; only the pages that
 * describe chunks hakmem maps are ever touched). It routes every free and
 * answers "is this pointer ours?" in one load, without a syscall.
 *
 * A SuperSlab's entry carries its dense index, which selects its row of slab
 * class tags in hak_ss_tags. Keeping the tags in one dense table (rather than
 * in each 2 MiB-aligned header, which all fall in the same L1 cache set)
 * keeps the free path's second load a cache hit. */
#ifndef HAK_CHUNK_MAP_H
#define HAK_CHUNK_MAP_H

#include "core/common.h"

enum hak_chunk_kind {
    HAK_CHUNK_NONE = 0,       /* not hakmem's */
    HAK_CHUNK_LARGE = 1,      /* first chunk of a large span */
    HAK_CHUNK_LARGE_TAIL = 2, /* later chunk of a large span */
    HAK_CHUNK_SS = 3,         /* SuperSlab, freed on the inline fast path */
    HAK_CHUNK_SS_CHECKED = 4, /* SuperSlab whose frees all go through the safety box */
};

/* Entry encoding: small values are the kinds above (large, none); a
 * SuperSlab is HAK_SS_ENTRY_BASE + its index, plus HAK_SS_ENTRY_CHECKED
 * when the safety box wants to see every free. */
#define HAK_SS_ENTRY_BASE    16u
#define HAK_SS_ENTRY_CHECKED 0x8000u
#define HAK_MAX_SS           (HAK_SS_ENTRY_CHECKED - HAK_SS_ENTRY_BASE)   /* 64 GiB of SuperSlabs */

#define HAK_CHUNK_MAP_ENTRIES ((size_t)1 << (HAK_ADDR_BITS - HAK_CHUNK_SHIFT))
HAK_DATA uint16_t hak_chunk_map[HAK_CHUNK_MAP_ENTRIES];
/* Class tag of every slab of every SuperSlab, by SuperSlab index. */
HAK_DATA uint8_t hak_ss_tags[HAK_MAX_SS][32];

/* Position of every slab within its run (0 for a run's first slab), so the
 * free path can find a multi-slab run's start without the header. */
HAK_DATA uint8_t hak_ss_runpos[HAK_MAX_SS][32];

/* HAK_SS_ENTRY_CHECKED or 0, chosen by the safety box at init. */
HAK_DATA uint16_t hak_ss_entry_flag;

HAK_INLINE unsigned hak_chunk_entry(const void *p) {
    uintptr_t i = (uintptr_t)p >> HAK_CHUNK_SHIFT;   /* one bound check covers high garbage */
    if (HAK_UNLIKELY(i >= HAK_CHUNK_MAP_ENTRIES)) return HAK_CHUNK_NONE;
    return __atomic_load_n(&hak_chunk_map[i], __ATOMIC_RELAXED);
}

static inline unsigned hak_entry_kind(unsigned e) {
    if (e < HAK_SS_ENTRY_BASE) return e;
    return (e & HAK_SS_ENTRY_CHECKED) ? HAK_CHUNK_SS_CHECKED : HAK_CHUNK_SS;
}
static inline unsigned hak_entry_ss_index(unsigned e) {
    return (e & ~HAK_SS_ENTRY_CHECKED) - HAK_SS_ENTRY_BASE;
}
HAK_INLINE unsigned hak_chunk_kind(const void *p) {
    return hak_entry_kind(hak_chunk_entry(p));
}

void hak_chunk_map_set(void *base, size_t size, unsigned first, unsigned rest);
void hak_chunk_map_clear(void *base, size_t size);

/* Bumped whenever hakmem unmaps chunks, so caches of "this chunk is ours"
 * (the mincore safety box keeps one) know to forget. */
HAK_DATA unsigned hak_chunk_unmap_epoch;

#endif
