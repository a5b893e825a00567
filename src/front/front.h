/* Front cache box contract.
 *
 * The front owns the per-thread bins (core/tls.h). Its hit path is NOT in
 * this table: malloc pops bins[cls] and free pushes onto it inline, with no
 * call, when the bin has a block (malloc) or room (free). The ops below run
 * only on a miss, so the chosen implementation costs nothing on a hit.
 *
 * Preconditions for every op: the calling thread is set up (hak_tls.state ==
 * 1, hak_tls.heap != NULL) and cls < HAK_NCLASS. */
#ifndef HAK_FRONT_H
#define HAK_FRONT_H

#include "core/tls.h"

struct hak_front_ops {
    const char *name;
    /* Blocks a bin of class cls may hold; 0 makes every call a miss. */
    uint32_t (*capacity)(unsigned cls);
    /* malloc found bins[cls] empty: return one block, or NULL (no memory). */
    void *(*alloc_miss)(struct hak_tls *t, unsigned cls);
    /* free found bins[cls] full: take p, a validated block of class cls. */
    void (*free_miss)(struct hak_tls *t, void *p, unsigned cls);
    /* Thread exit: hand every cached block back to the backend. */
    void (*flush_all)(struct hak_tls *t);
};

extern const struct hak_front_ops hak_front_tcache;
extern const struct hak_front_ops hak_front_direct;
/* The front chosen at init; frozen afterwards. */
extern const struct hak_front_ops *hak_front;

#endif
