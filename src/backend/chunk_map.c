#include "backend/chunk_map.h"
#include "os/os.h"

struct hak_free_tables hak_free_tables;
uint8_t hak_ss_runpos[HAK_ENTRY_ROWS][HAK_SLABS_PER_SS];
uint16_t hak_ss_entry_flag;
unsigned hak_chunk_unmap_epoch;
uintptr_t hak_tag_window_base;
int hak_tag_window_on;

void hak_tag_window_init(int on) {
    /* Mappings go top-down from here: the window ends 1 GiB above it
     * (room for holes the kernel may fill later above) and reaches 15 GiB
     * below. */
    if (!on) return;   /* no window: every free through the chunk map */
    uintptr_t next = (uintptr_t)hak_os_next_map_hint();
    uintptr_t above = (uintptr_t)1 << 30, span = (uintptr_t)1 << HAK_TAG_WINDOW_SHIFT;
    if (!next) return;
    uintptr_t end = hak_align_up(next + above, HAK_CHUNK_SIZE);
    hak_tag_window_base = end > span ? end - span : 0;
    hak_tag_window_on = 1;
}

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
