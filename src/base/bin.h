/* Pop and push on a thread's bin, for the slow paths of every layer (the
 * hit paths have their own, on a bin reached through the thread's segment:
 * api/fastpath.h). */
#ifndef HAK_BIN_H
#define HAK_BIN_H

#include "base/tls.h"
#include "base/track.h"

HAK_INLINE void *hak_bin_pop(struct hak_bin *b, void *p) {
    b->head = hak_link_get(p);
    b->room++;
    hak_mark_clear(p);
    return p;
}

/* A small block stops being the program's (memcheck is told; the free
 * mark comes with the link that puts it on a list). */
HAK_INLINE void hak_block_freed(void *p) {
    (void)p;
    hak_track_free(p);
}

HAK_INLINE void hak_bin_push(struct hak_bin *b, void *p) {
    hak_block_freed(p);
    hak_link_set(p, b->head);
    b->head = p;
    b->room--;
}

#endif
