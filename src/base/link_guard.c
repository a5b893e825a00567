#include "base/link_guard.h"

uintptr_t hak_link_key;
void (*hak_link_bad)(const void *blk);

#define ADDR_MASK (((uintptr_t)1 << 48) - 1)

/* the word after the link; the fourth is the inbox's chain word
 * (backend/heap_remote.c) */
HAK_INLINE uint32_t *check_word(void *blk) { return (uint32_t *)blk + 2; }

/* One mix of the block's address and the key serves both words: its low
 * 48 bits key the link, and the whole of it, as an odd multiplier, the
 * check of the link it decodes to, so a link changed by any amount fails
 * its check unless the block's mix is known. Inlined although this file
 * is compiled for size (src/meson.build): with the hardened box every
 * refill and flush runs these for each block. */
HAK_INLINE uint64_t block_mix(const void *blk) {
    return hak_mix64((uintptr_t)blk ^ hak_link_key);
}

HAK_INLINE uint32_t link_check(uint64_t m, uintptr_t enc) {
    return (uint32_t)(((enc ^ m) * (m | 1)) >> 32);
}

void hak_list_set_guarded(void *blk, void *next) {
    uint64_t m = block_mix(blk);
    uintptr_t enc = (uintptr_t)next ^ (m & ADDR_MASK);
    hak_link_set(blk, (void *)enc);
    hak_word_put(check_word(blk), link_check(m, enc));
}

void *hak_list_get_guarded(void *blk) {
    uintptr_t enc = (uintptr_t)hak_link_get(blk);
    uint64_t m = block_mix(blk);
    if (HAK_UNLIKELY((enc & ~ADDR_MASK) || hak_word_get(check_word(blk)) != link_check(m, enc))) {
        if (hak_link_bad) hak_link_bad(blk);
        return NULL;
    }
    return (void *)(enc ^ (m & ADDR_MASK));
}
