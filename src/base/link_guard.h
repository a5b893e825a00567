/* The links of the backend's free lists (runs' free lists, heaps'
 * inboxes, and the chains it builds for and takes from bins), as opposed
 * to the hit paths' own pops and pushes (base/track.h, api/fastpath.h).
 *
 * With hak_link_key 0 (every safety box but hardened) a list link is a
 * plain link, as the hit paths read and write it. The hardened box, which
 * sets a key, gives bins no room: the hit paths never see a keyed link. The hardened box sets a random key at init: a link is then
 * stored XORed with a key derived from the block's address (so the free
 * mark, HAK_FREE_TAG in the top 16 bits, stays where base/track.h puts
 * it), and the block's third 32-bit word holds a check of the stored link
 * and the address. A pop checks both: a link a program overwrote (a write
 * after free) or planted (a forged pointer, even one XORed with the
 * public HAK_LINK_TAG) fails the check, is reported through hak_link_bad,
 * and is never followed: the list ends there (its other blocks are lost,
 * which keeps the process correct when it goes on under
 * HAKMEM_ON_ERROR=warn). The branch on the key is on miss paths only:
 * the hit paths never touch these lists. */
#ifndef HAK_LINK_GUARD_H
#define HAK_LINK_GUARD_H

#include "base/track.h"

HAK_DATA uintptr_t hak_link_key;            /* 0: links are plain */
/* Called with the block whose link failed its check (set from above: the
 * safety box reports it). */
HAK_DATA void (*hak_link_bad)(const void *blk);

void *hak_list_get_guarded(void *blk);
void  hak_list_set_guarded(void *blk, void *next);

HAK_INLINE void *hak_list_get(void *blk) {
    if (HAK_UNLIKELY(hak_link_key)) return hak_list_get_guarded(blk);
    return hak_link_get(blk);
}
HAK_INLINE void hak_list_set(void *blk, void *next) {
    if (HAK_UNLIKELY(hak_link_key)) hak_list_set_guarded(blk, next);
    else hak_link_set(blk, next);
}

/* A 64-bit mix (a multiply-xorshift finaliser), for keys and checks. */
HAK_INLINE uint64_t hak_mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return x;
}

#endif
