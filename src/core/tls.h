/* The per-thread state the inline fast paths use: one bin (a free list with
 * the room it has left and its capacity) per size class, and the thread's
 * heap. Zero-filled at thread start: every bin is empty with no room, so the
 * first malloc or free of a thread takes the slow path, which sets the thread
 * up. No init check ever runs on the fast path. Kept small: it is
 * initial-exec TLS. */
#ifndef HAK_TLS_H
#define HAK_TLS_H

#include "core/size_class.h"

struct hak_heap;

struct hak_bin {
    void *head;
    uint32_t room;    /* blocks it can still take: free tests one field */
    uint32_t max;     /* capacity; 0 = caches nothing (box "none", invalid class) */
};

struct hak_tls {
    struct hak_bin bins[HAK_NBINS];
    struct hak_heap *heap;
    int state;        /* 0 new, 1 live, 2 torn down (thread exiting) */
};

HAK_DATA __thread struct hak_tls hak_tls __attribute__((tls_model("initial-exec")));

/* Slow-path entry: sets up the calling thread (and the process) if needed.
 * Returns NULL only when no memory could be had for the heap. */
struct hak_heap *hak_thread_heap(void);

static inline uint32_t hak_bin_count(const struct hak_bin *b) { return b->max - b->room; }

#endif
