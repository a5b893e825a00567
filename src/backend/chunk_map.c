#include "backend/chunk_map.h"
#include "os/os.h"

#include <stddef.h>

HAK_SPARSE struct hak_free_tables hak_free_tables;
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

HAK_SPARSE uint16_t *hak_chunk_dir[HAK_CHUNK_DIR_ENTRIES];

_Static_assert(offsetof(struct hak_free_tables, class_magic) >= (16u << 20),
               "class_magic 16 MiB or more into the free tables (see chunk_map.h)");

static unsigned static_leaves_used;

/* A zeroed leaf: one of the tables' own, else metadata memory. */
static uint16_t *leaf_new(void) {
    unsigned k = __atomic_fetch_add(&static_leaves_used, 1, __ATOMIC_RELAXED);
    if (k < HAK_CHUNK_STATIC_LEAVES) return hak_free_tables.chunk_leaves[k];
    uint16_t *leaf = hak_os_meta_alloc(sizeof hak_free_tables.chunk_leaves[0]);
    if (leaf) return leaf;
    static const char msg[] = "hakmem: no memory for the chunk map\n";
    hak_os_write_stderr(msg, sizeof msg - 1);
    __builtin_trap();
}

/* The leaf holding entry i, made on first use. Two threads may make the
 * same leaf at once (mapping neighbouring chunks): one wins the exchange,
 * the other's leaf (zeros, never freed) is lost, 8 KiB. */
static uint16_t *leaf_for(uintptr_t i) {
    uint16_t **slot = &hak_chunk_dir[i >> HAK_CHUNK_LEAF_SHIFT];
    uint16_t *leaf = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (leaf) return leaf;
    uint16_t *fresh = leaf_new(), *seen = NULL;
    if (__atomic_compare_exchange_n(slot, &seen, fresh, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
        return fresh;
    return seen;
}

void hak_chunk_map_set(void *base, size_t size, unsigned first, unsigned rest) {
    uintptr_t i = (uintptr_t)base >> HAK_CHUNK_SHIFT;
    uintptr_t n = size >> HAK_CHUNK_SHIFT;
    for (uintptr_t k = 0; k < n; k++) {
        uint16_t *leaf = leaf_for(i + k);
        __atomic_store_n(&leaf[(i + k) & (HAK_CHUNK_LEAF_ENTRIES - 1)], (uint16_t)(k ? rest : first),
                         __ATOMIC_RELEASE);
    }
}

void hak_chunk_map_clear(void *base, size_t size) {
    hak_chunk_map_set(base, size, HAK_CHUNK_NONE, HAK_CHUNK_NONE);
    __atomic_fetch_add(&hak_chunk_unmap_epoch, 1, __ATOMIC_RELEASE);
}
