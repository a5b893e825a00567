/* Safety box contract: "does hakmem own this pointer, and which block is
 * it?" for free, realloc and malloc_usable_size.
 *
 * The inline free path never calls the box: it handles pointers whose chunk
 * entry is a plain SuperSlab entry (see backend/chunk_map.h). A box that wants
 * to see every free sets ss_entry_flag to HAK_SS_ENTRY_CHECKED, and then every free
 * of a small block reaches classify() too.
 *
 * classify() must accept any value of p (NULL excluded: callers handle it),
 * including stack, static, unmapped and garbage addresses, without faulting,
 * and must not allocate. */
#ifndef HAK_SAFETY_H
#define HAK_SAFETY_H

#include "base/common.h"

struct hak_large;

enum hak_ptr_kind {
    HAK_PTR_FOREIGN,   /* not hakmem's: hand it to the C library */
    HAK_PTR_SMALL,     /* a block of a SuperSlab run; info.cls is its class */
    HAK_PTR_LARGE,     /* a large block; info.large is its span */
    HAK_PTR_INVALID,   /* inside hakmem's memory but not a live block start */
};

struct hak_ptr_info {
    unsigned cls;
    struct hak_large *large;
    const char *reason;   /* for HAK_PTR_INVALID: what is wrong with it */
};

struct hak_hardened_ops;

struct hak_safety_ops {
    const char *name;
    uint16_t ss_entry_flag;
    enum hak_ptr_kind (*classify)(const void *p, struct hak_ptr_info *info);
    /* NULL but for the hardened box, which also wraps every block (below) */
    const struct hak_hardened_ops *hardened;
};

HAK_DATA const struct hak_safety_ops hak_safety_registry;
HAK_DATA const struct hak_safety_ops hak_safety_mincore;   /* only with -Dmincore=on */
HAK_DATA const struct hak_safety_ops hak_safety_hardened;  /* only with -Dhardened=on */

/* The hardened box (safety/hardened.c) wraps the backend's blocks. Chosen,
 * it gives the bins no room (so every malloc and free misses the hit
 * path) and checks every free (HAK_SS_ENTRY_CHECKED; the tag window stays
 * on for its own use, with the hit path's checks turned to fail every
 * pointer); the API's miss paths then call these instead of the caches. A small block is laid out
 * as: the request, a canary, the recorded request size (checked with the
 * process's secret), and a last word that is the next block's head guard;
 * a large block ends in an inaccessible guard page. */
struct hak_tls;
struct hak_hardened_ops {
    /* At init, before any block is handed out: the secret and the keys. */
    void (*init)(void);
    /* The bytes a request of size needs: of a small block, and of a large one. */
    size_t (*small_need)(size_t size);
    size_t (*large_need)(size_t size);
    /* A free block of class cls for the calling thread (live, state 1),
     * picked at random among a few; NULL when there is no memory. */
    void *(*take)(struct hak_tls *t, unsigned cls);
    /* Writes the guards of block p of `size` bytes requested, in a small
     * block (large = 0: usable is the least its class has; the block's run
     * says what it has), or a large block of usable bytes (large = 1: its
     * last page becomes the guard page). */
    void (*arm)(void *p, size_t size, size_t usable, int large);
    /* Checks block p's guards for op (free, realloc, ...); returns the
     * size it was asked with, or SIZE_MAX after a report (the call must
     * then do nothing). */
    size_t (*check)(const char *op, void *p, size_t usable, int large);
    /* A small block of class cls that passed check, freed by the program:
     * to the thread's quarantine. */
    void (*release_small)(struct hak_tls *t, void *p, unsigned cls);
    /* A large block that passed check, before it goes back: its guard page
     * becomes writable again. */
    void (*disarm_large)(void *p, size_t usable);
    /* Thread exit (t still live): what the thread keeps goes back. */
    void (*thread_exit)(struct hak_tls *t);
    /* In a child after fork: its one thread is the only one with state. */
    void (*fork_child)(void);
    /* The common cases in one call each, tried first: malloc of a small
     * block the thread has at hand, and free of a live small block with
     * intact guards. Anything else goes on to the caller's general path,
     * passed as general (the paths above, which refill, and report what
     * is wrong), by a tail call: the caller needs no stack frame to come
     * back to. */
    void *(*malloc_fast)(size_t size, void *(*general)(size_t size));
    void (*free_fast)(void *p, void (*general)(void *p));
};
HAK_DATA const struct hak_safety_ops *hak_safety;

/* The checks shared by the boxes once a chunk's map entry is known:
 * SuperSlab block start in a live run, or the exact user pointer of a large
 * span (hak_classify_at_span, once its header is found; the caller counts
 * itself a reader, backend/large.h). */
enum hak_ptr_kind hak_classify_at_span(const void *p, const struct hak_large *h, int check_block,
                                       struct hak_ptr_info *info);
enum hak_ptr_kind hak_classify_in_chunk(const void *p, unsigned chunk_entry,
                                        int check_block, struct hak_ptr_info *info);

/* Bad-free handling (safety/badfree.c), shared by the boxes that check. */
#define HAK_REASON_DOUBLE   "double free"
#define HAK_REASON_INTERIOR "interior pointer (not the start of a block)"
#define HAK_REASON_FOREIGN  "not allocated by hakmem"
#define HAK_REASON_NOT_LIVE "not a live block (never handed out)"
#define HAK_REASON_OVERFLOW "heap overflow: the bytes past the block were overwritten"
#define HAK_REASON_UNDERFLOW "heap underflow: the bytes before the block were overwritten"
#define HAK_REASON_WRITE_FREED "write after free: the block changed in quarantine"
#define HAK_REASON_LINK "corrupted free-list link"

/* Reports a bad call as HAKMEM_ON_ERROR says: one line on stderr, then
 * abort (default), or just the line (warn), or nothing (ignore). Returns
 * only when the process goes on; the call must then have no effect. */
void hak_report_bad(const char *op, const void *p, const char *reason);
/* A small block whose free mark is set: 1 if it really is free already
 * (found in one of the caller's bins it can be in, its run's free list or
 * its heap's inbox). */
int hak_small_is_free(void *p, unsigned cls);
/* 1 when a pointer hakmem does not own looks like a C-library block (so it
 * can be handed on); 0 for stack, static, misaligned or unreadable ones. */
int hak_foreign_plausible(const void *p);

#endif
