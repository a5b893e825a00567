/* The chunk map: one byte per 2 MiB chunk of the 47-bit user address space
 * (64 MiB of zero-fill-on-demand .bss; only the pages that describe chunks
 * hakmem maps are ever touched). It routes every free and answers "is this
 * pointer ours?" in one load, without a syscall. */
#ifndef HAK_CHUNK_MAP_H
#define HAK_CHUNK_MAP_H

#include "core/common.h"

enum hak_chunk_kind {
    HAK_CHUNK_NONE = 0,       /* not hakmem's */
    HAK_CHUNK_SS = 1,         /* SuperSlab, freed on the inline fast path */
    HAK_CHUNK_SS_CHECKED = 2, /* SuperSlab, but every free goes through the safety box */
    HAK_CHUNK_LARGE = 3,      /* first chunk of a large span */
    HAK_CHUNK_LARGE_TAIL = 4, /* later chunk of a large span */
};

#define HAK_CHUNK_MAP_ENTRIES ((size_t)1 << (HAK_ADDR_BITS - HAK_CHUNK_SHIFT))
extern uint8_t hak_chunk_map[HAK_CHUNK_MAP_ENTRIES];

/* Tag given to SuperSlab chunks: HAK_CHUNK_SS unless the chosen safety box
 * wants to see every free. Set once at init. */
extern uint8_t hak_ss_chunk_tag;

HAK_INLINE unsigned hak_chunk_kind(const void *p) {
    uintptr_t a = (uintptr_t)p;
    if (HAK_UNLIKELY(a >> HAK_ADDR_BITS)) return HAK_CHUNK_NONE;
    return __atomic_load_n(&hak_chunk_map[a >> HAK_CHUNK_SHIFT], __ATOMIC_RELAXED);
}

void hak_chunk_map_set(void *base, size_t size, unsigned first_kind, unsigned rest_kind);
void hak_chunk_map_clear(void *base, size_t size);

#endif

/* Bumped whenever hakmem unmaps chunks, so caches of "this chunk is ours"
 * (the mincore safety box keeps one) know to forget. */
extern unsigned hak_chunk_unmap_epoch;
