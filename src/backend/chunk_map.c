#include "backend/chunk_map.h"

struct hak_free_tables hak_free_tables;
uint8_t hak_ss_runpos[HAK_ENTRY_ROWS][HAK_SLABS_PER_SS];
uint16_t hak_ss_entry_flag;
unsigned hak_chunk_unmap_epoch;

void hak_chunk_map_set(void *base, size_t size, unsigned first, unsigned rest) {
    uintptr_t i = (uintptr_t)base >> HAK_CHUNK_SHIFT;
    uintptr_t n = size >> HAK_CHUNK_SHIFT;
    for (uintptr_t k = 0; k < n; k++)
        __atomic_store_n(&hak_chunk_map[i + k], (uint16_t)(k ? rest : first), __ATOMIC_RELEASE);
}

void hak_chunk_map_clear(void *base, size_t size) {
    hak_chunk_map_set(base, size, HAK_CHUNK_NONE, HAK_CHUNK_NONE);
    __atomic_fetch_add(&hak_chunk_unmap_epoch, 1, __ATOMIC_RELEASE);
}
