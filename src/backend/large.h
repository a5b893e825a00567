/* Large path box contract: requests above HAK_SMALL_MAX. Two
 * implementations share one span layout (backend/large.c):
 *   cached (large_cached.c, default): freed spans wait in a cache for
 *     reuse, cut to size or grown, and give their pages back on the clock;
 *   direct (large_direct.c, -Ddirect=on): every block is its own mapping,
 *     unmapped at free, resized by mremap page for page: no memory kept
 *     for reuse, at the cost of a map and an unmap per block.
 * Chosen once at init (HAKMEM_LARGE); only misses reach the large path, so
 * the ops table costs no hit path anything.
 *
 * The span layout: a block gets its own span of 2 MiB-aligned chunks,
 * registered in the chunk map (first chunk HAK_CHUNK_LARGE, the rest
 * HAK_CHUNK_LARGE_TAIL). The span's header sits at its start; the user
 * block follows at the requested alignment. Only the pages the block
 * reaches are mapped: a 270 KB block whose 2 MiB were all mapped cost
 * eight times its size in address space and commit charge, and failed
 * under `ulimit -v` where glibc's did not. The rest of the last chunk may
 * then hold anything (a file, a stack, glibc's mmap): pointers there are
 * not hakmem's. */
#ifndef HAK_LARGE_H
#define HAK_LARGE_H

#include "base/common.h"

#define HAK_LARGE_MAGIC 0x68616b6d4c617267ull  /* "hakmLarg" */
/* Bytes before the block at the smallest alignment: the header's. */
#define HAK_LARGE_HEADER 64

struct hak_large {
    uint64_t magic;
    size_t span;              /* bytes of chunks it holds in the chunk map, a multiple of HAK_CHUNK_SIZE */
    size_t mapped;            /* bytes mapped from its start: pages, at most span */
    void *user;               /* the block handed out; NULL while cached */
    size_t usable;            /* bytes from user to the end of the block's last page */
    struct hak_large *next;   /* cache list (cached) */
    /* Bytes from the span's start past which no page has been written
     * since it was mapped or last purged: the furthest any block of it
     * reached (its usable end). Those pages read as zeros. */
    size_t dirty;
    uint32_t freed_ms;        /* when it entered the cache (hak_os_clock_ms; cached) */
};

struct hak_large_ops {
    const char *name;
    /* A block of size bytes at align (0 or a power of two), or NULL with
     * errno ENOMEM. *stale (when not NULL) is how many of the block's
     * first bytes may hold old data (a reused span); the rest, and a fresh
     * mapping, read as zeros. */
    void *(*alloc)(size_t size, size_t align, size_t *stale);
    /* h is the header found for the block (hak_large_header). */
    void (*free)(struct hak_large *h);
    /* The block resized to size (> HAK_SMALL_MAX), contents kept, moved
     * or not; NULL with errno ENOMEM and the block untouched. */
    void *(*realloc)(struct hak_large *h, size_t size);
    /* Unmaps every span kept for reuse; returns how many bytes that gave back. */
    size_t (*release_cache)(void);
    /* Purges the pages of kept spans that have waited long enough, at
     * most max_calls of them; returns how many. */
    unsigned (*decay)(uint32_t now, uint32_t period, unsigned max_calls);
    /* Bytes of spans kept for reuse. */
    size_t (*cached_bytes)(void);
    /* Its lock around fork (NULL: it has none). */
    void (*fork_prepare)(void);
    void (*fork_parent)(void);
    void (*fork_child)(void);
};

/* The implementations (api/boxes.c lists them; direct only with -Ddirect=on). */
HAK_DATA const struct hak_large_ops hak_large_cached;
HAK_DATA const struct hak_large_ops hak_large_direct;
/* The box chosen at init; frozen afterwards. */
HAK_DATA const struct hak_large_ops *hak_large_box;

static inline void *hak_large_alloc(size_t size, size_t align, size_t *stale) {
    return hak_large_box->alloc(size, align, stale);
}
static inline void hak_large_free(struct hak_large *h) { hak_large_box->free(h); }
static inline void *hak_large_realloc(struct hak_large *h, size_t size) {
    return hak_large_box->realloc(h, size);
}
static inline size_t hak_large_release_cache(void) { return hak_large_box->release_cache(); }

/* ---- shared by the implementations (backend/large.c) ------------------ */

/* Header of the span containing p, walking back over tail chunks, or NULL. */
struct hak_large *hak_large_header(const void *p);

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
void hak_large_readers_wait(void);

/* Offset of the user block from the span start for this alignment. */
size_t hak_large_user_offset(size_t align);
/* Bytes of chunks for a block of size at align; 0 when too large. */
size_t hak_large_span_for(size_t size, size_t align);
/* Usable end of a block of size bytes at offset off: the end of its last page. */
size_t hak_large_reach_for(size_t off, size_t size);
/* A new span of `span` bytes at align with only the first `reach` bytes'
 * pages mapped (h->mapped set; nothing else), or NULL. */
struct hak_large *hak_large_map_span(size_t span, size_t reach, size_t align);
/* Fills in span h's header for a block of `reach` bytes from its start
 * at the offset for align. */
void hak_large_publish(struct hak_large *h, size_t span, size_t align, size_t reach);
/* Enters / removes `bytes` of span chunks from p on in the chunk map. */
void hak_large_map_add(void *p, size_t bytes);
void hak_large_map_remove(void *p, size_t bytes);
/* Moves or grows h's span (mremap, no copy) to `span` bytes of chunks of
 * which the first `map` are mapped, for a block of `reach` bytes from the
 * span's start, at the same offset; returns the new header, or NULL with
 * errno ENOMEM and h as it was. */
struct hak_large *hak_large_remap(struct hak_large *h, size_t span, size_t map, size_t reach);

void hak_large_fork_prepare(void);
void hak_large_fork_parent(void);
void hak_large_fork_child(void);

struct hak_large_stats { size_t mapped, unmapped, cache_hits, cached_bytes, remaps, live_bytes, live_spans, splits, purges, grown; };
/* The counters, kept by the implementations with relaxed atomic adds
 * (hak_large_count); cached_bytes is filled in by hak_large_stats. */
HAK_DATA struct hak_large_stats hak_large_st;
#define hak_large_count(field, n) __atomic_fetch_add(&hak_large_st.field, (n), __ATOMIC_RELAXED)
#define hak_large_uncount(field, n) __atomic_fetch_sub(&hak_large_st.field, (n), __ATOMIC_RELAXED)
void hak_large_stats(struct hak_large_stats *out);

/* A process that never mapped a large span has none to decay: it skips
 * the box, whose code lies among what such a process never runs
 * (src/meson.build, hakmem_objects). */
static inline unsigned hak_large_decay(uint32_t now, uint32_t period, unsigned max_calls) {
    if (!__atomic_load_n(&hak_large_st.mapped, __ATOMIC_RELAXED)) return 0;
    return hak_large_box->decay(now, period, max_calls);
}

#endif
