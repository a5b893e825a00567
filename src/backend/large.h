/* Large path: requests above HAK_SMALL_MAX get their own span of 2 MiB-aligned
 * chunks, registered in the chunk map. The span's header sits at its start;
 * the user block follows at the requested alignment. Only the pages the
 * block reaches are mapped at first: a 270 KB block whose 2 MiB were all
 * mapped cost eight times its size in address space and commit charge,
 * and failed under `ulimit -v` where glibc's did not. The rest of the last
 * chunk may then hold anything (a file, a stack, glibc's mmap): pointers
 * there are not hakmem's. Freed spans wait in a small
 * cache for reuse (a larger one is cut to size, the rest stays cached);
 * realloc moves pages with mremap instead of copying. */
#ifndef HAK_LARGE_H
#define HAK_LARGE_H

#include "base/common.h"

#define HAK_LARGE_MAGIC 0x68616b6d4c617267ull  /* "hakmLarg" */

struct hak_large {
    uint64_t magic;
    size_t span;              /* bytes of chunks it holds in the chunk map, a multiple of HAK_CHUNK_SIZE */
    size_t mapped;            /* bytes mapped from its start: pages, at most span */
    void *user;               /* the block handed out; NULL while cached */
    size_t usable;            /* bytes from user to the end of the block's last page */
    struct hak_large *next;   /* cache list */
    /* Bytes from the span's start past which no page has been written
     * since it was mapped or last purged: the furthest any block of it
     * reached (its usable end). Those pages read as zeros. */
    size_t dirty;
    uint32_t freed_ms;        /* when it entered the cache (hak_os_clock_ms) */
};

/* Threads reading a span's header to classify a pointer in its chunks.
 * A pointer in the unmapped rest of a span's last chunk is someone else's
 * and may be freed while the span goes away, so a span that is unmapped or
 * moved first leaves the chunk map, then waits until no reader is left
 * (hak_large_readers_wait): a reader that still found it in the map reads
 * a header whose pages are there. Large blocks' frees only. */
HAK_DATA unsigned hak_large_readers;
static inline void hak_large_read_begin(void) {
    __atomic_fetch_add(&hak_large_readers, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);   /* before the chunk map is read again */
}
static inline void hak_large_read_end(void) {
    __atomic_fetch_sub(&hak_large_readers, 1, __ATOMIC_RELEASE);
}

/* *stale (when not NULL) is how many of the block's first bytes may hold
 * old data (a span from the cache); the rest, and a fresh mapping, read
 * as zeros. */
void  *hak_large_alloc(size_t size, size_t align, size_t *stale);
/* h is the header found for p (see hak_large_header). */
void   hak_large_free(struct hak_large *h);
void  *hak_large_realloc(struct hak_large *h, size_t size);
/* Header of the span containing p, walking back over tail chunks, or NULL. */
struct hak_large *hak_large_header(const void *p);

/* Unmaps every cached span; returns how many bytes that gave back. */
size_t hak_large_release_cache(void);
/* Purges the pages of cached spans that have waited long enough (a
 * number of periods of HAKMEM_DECAY_MS; see large.c), at most max_calls
 * of them; returns how many. */
unsigned hak_large_decay(uint32_t now, uint32_t period, unsigned max_calls);

void hak_large_fork_prepare(void);
void hak_large_fork_parent(void);
void hak_large_fork_child(void);

struct hak_large_stats { size_t mapped, unmapped, cache_hits, cached_bytes, remaps, live_bytes, live_spans, splits, purges, grown; };
void hak_large_stats(struct hak_large_stats *out);

#endif
