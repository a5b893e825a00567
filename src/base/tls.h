/* The per-thread state the inline fast paths use: one bin (a free list with
 * the room it has left and its capacity) per size class, and the thread's
 * heap. Zero-filled at thread start: every bin is empty with no room, so the
 * first malloc or free of a thread takes the slow path, which sets the thread
 * up. No init check ever runs on the fast path. Kept small: it is
 * initial-exec TLS. */
#ifndef HAK_TLS_H
#define HAK_TLS_H

#include "base/size_class.h"

struct hak_heap;

struct hak_bin {
    void *head;
    uint32_t room;    /* blocks it can still take: free tests one field */
    uint32_t max;     /* capacity; 0 = unprimed (front/front.h) or caches nothing (box "none", invalid class) */
};

struct hak_tls {
    struct hak_bin bins[HAK_NBINS];
    struct hak_heap *heap;
    /* classes this thread has taken blocks of from its heap (a malloc
     * miss): a bin of any other class only ever gets blocks by free */
    uint64_t refilled[(HAK_NBINS + 63) / 64];
    /* misses of each class served by a larger block from another of its
     * bins, at most HAK_STANDIN_MAX (front/front.h) */
    uint8_t standins[HAK_NBINS];
    /* blocks of each class freed while its bin was unprimed (max 0) and
     * sent straight to the heaps that own them, at most HAK_SEND_HOME_MAX
     * (front/front.h) */
    uint8_t sent_home[HAK_NBINS];
    int state;        /* 0 new, 1 live, 2 torn down (thread exiting) */
};

HAK_DATA __thread struct hak_tls hak_tls __attribute__((tls_model("initial-exec")));

/* Slow-path entry: sets up the calling thread (and the process) if needed.
 * Returns NULL only when no memory could be had for the heap. */
struct hak_heap *hak_thread_heap(void);

/* The hit paths reach the calling thread's bins through the %fs segment
 * (GCC and clang's __seg_fs address space): they need only hak_tls's
 * offset from the thread pointer, one load from the GOT, and not the thread
 * pointer itself as well, which saves an instruction on malloc and on free.
 * Sanitizer builds, which do not instrument segment accesses, and other
 * targets use an ordinary pointer. The slow paths always use &hak_tls. */
#if defined(__x86_64__) && defined(__SEG_FS) && !HAK_HAS_SANITIZER
typedef struct hak_bin __seg_fs hak_fast_bin;
HAK_INLINE hak_fast_bin *hak_fast_bins(void) {
    uintptr_t off;   /* what the compiler loads for &hak_tls, minus %fs:0 */
    __asm__("movq hak_tls@gottpoff(%%rip), %0" : "=r"(off));
    return (hak_fast_bin *)(off + offsetof(struct hak_tls, bins));
}
#else
typedef struct hak_bin hak_fast_bin;
HAK_INLINE hak_fast_bin *hak_fast_bins(void) { return hak_tls.bins; }
#endif

static inline uint32_t hak_bin_count(const struct hak_bin *b) { return b->max - b->room; }

#endif
