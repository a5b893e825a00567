#include "base/link_guard.h"

uintptr_t hak_link_key;
void (*hak_link_bad)(const void *blk);

#define ADDR_MASK (((uintptr_t)1 << 48) - 1)

/* the word after the link; the fourth is the inbox's chain word
 * (backend/heap_remote.c) */
HAK_INLINE uint32_t *check_word(void *blk) { return (uint32_t *)blk + 2; }

/* Inlined although this file is compiled for size (src/meson.build): with
 * the hardened box every refill and flush runs these for each block, and
 * as calls they were a fifth of the link's cost. */
HAK_INLINE uintptr_t addr_key(const void *blk) {
    return hak_mix64((uintptr_t)blk ^ hak_link_key) & ADDR_MASK;
}

HAK_INLINE uint32_t link_check(const void *blk, uintptr_t enc) {
    return (uint32_t)(hak_mix64(enc ^ ((uintptr_t)blk << 16) ^ ~hak_link_key) >> 32);
}

void hak_list_set_guarded(void *blk, void *next) {
    uintptr_t enc = (uintptr_t)next ^ addr_key(blk);
    hak_link_set(blk, (void *)enc);
    hak_word_put(check_word(blk), link_check(blk, enc));
}

void *hak_list_get_guarded(void *blk) {
    uintptr_t enc = (uintptr_t)hak_link_get(blk);
    if (HAK_UNLIKELY((enc & ~ADDR_MASK) || hak_word_get(check_word(blk)) != link_check(blk, enc))) {
        if (hak_link_bad) hak_link_bad(blk);
        return NULL;
    }
    return (void *)(enc ^ addr_key(blk));
}
