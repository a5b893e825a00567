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

struct hak_safety_ops {
    const char *name;
    uint16_t ss_entry_flag;
    enum hak_ptr_kind (*classify)(const void *p, struct hak_ptr_info *info);
};

HAK_DATA const struct hak_safety_ops hak_safety_registry;
HAK_DATA const struct hak_safety_ops hak_safety_mincore;   /* only with -Dmincore=on */
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
