#include "backend/chunk_map.h"

uint8_t hak_chunk_map[HAK_CHUNK_MAP_ENTRIES];
uint8_t hak_ss_chunk_tag = HAK_CHUNK_SS;
unsigned hak_chunk_unmap_epoch;

void hak_chunk_map_set(void *base, size_t size, unsigned first_kind, unsigned rest_kind) {
    uintptr_t i = (uintptr_t)base >> HAK_CHUNK_SHIFT;
    uintptr_t n = size >> HAK_CHUNK_SHIFT;
    for (uintptr_t k = 0; k < n; k++)
        __atomic_store_n(&hak_chunk_map[i + k], (uint8_t)(k ? rest_kind : first_kind), __ATOMIC_RELEASE);
}

void hak_chunk_map_clear(void *base, size_t size) {
    hak_chunk_map_set(base, size, HAK_CHUNK_NONE, HAK_CHUNK_NONE);
    __atomic_fetch_add(&hak_chunk_unmap_epoch, 1, __ATOMIC_RELEASE);
}
