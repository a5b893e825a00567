/* The per-thread state the inline fast paths use: one bin (a free list with
 * a count and a capacity) per size class, and the thread's heap. Zero-filled
 * at thread start: every bin is empty with capacity 0, so the first malloc or
 * free of a thread takes the slow path, which sets the thread up. No init
 * check ever runs on the fast path. Kept small: it is initial-exec TLS. */
#ifndef HAK_TLS_H
#define HAK_TLS_H

#include "core/size_class.h"

struct hak_heap;

struct hak_bin {
    void *head;
    uint32_t count;
    uint32_t max;     /* 0 = this bin caches nothing (front=none, invalid class) */
};

struct hak_tls {
    struct hak_bin bins[HAK_NBINS];
    struct hak_heap *heap;
    int state;        /* 0 new, 1 live, 2 torn down (thread exiting) */
};

extern __thread struct hak_tls hak_tls __attribute__((tls_model("initial-exec")));

/* Slow-path entry: sets up the calling thread (and the process) if needed.
 * Returns NULL only when no memory could be had for the heap. */
struct hak_heap *hak_thread_heap(void);

#endif
