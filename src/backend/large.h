/* Large path: requests above HAK_SMALL_MAX get their own span of 2 MiB-aligned
 * chunks, mapped with mmap. The span's header sits at its start; the user
 * block follows at the requested alignment. Freed spans wait in a small
 * cache for reuse; realloc moves pages with mremap instead of copying. */
#ifndef HAK_LARGE_H
#define HAK_LARGE_H

#include "core/common.h"

#define HAK_LARGE_MAGIC 0x68616b6d4c617267ull  /* "hakmLarg" */

struct hak_large {
    uint64_t magic;
    size_t span;              /* bytes mapped, a multiple of HAK_CHUNK_SIZE */
    void *user;               /* the block handed out */
    size_t usable;            /* bytes from user to the end of the span */
    struct hak_large *next;   /* cache list */
};

/* *reused (when not NULL) says whether the span came from the cache, i.e.
 * may hold old data; a fresh mapping reads as zeros. */
void  *hak_large_alloc(size_t size, size_t align, int *reused);
/* h is the header found for p (see hak_large_header). */
void   hak_large_free(struct hak_large *h);
void  *hak_large_realloc(struct hak_large *h, size_t size);
/* Header of the span containing p, walking back over tail chunks, or NULL. */
struct hak_large *hak_large_header(const void *p);

/* Unmaps every cached span; returns how many bytes that gave back. */
size_t hak_large_release_cache(void);

void hak_large_fork_prepare(void);
void hak_large_fork_parent(void);
void hak_large_fork_child(void);

struct hak_large_stats { size_t mapped, unmapped, cache_hits, cached_bytes, remaps, live_bytes; };
void hak_large_stats(struct hak_large_stats *out);

#endif
