#include "backend/large.h"
#include "backend/chunk_map.h"
#include "os/os.h"
#include "backend/superslab.h"
#include "base/options.h"
#include "base/track.h"

#include <errno.h>
#include <string.h>

#define HAK_LARGE_HEADER 64
_Static_assert(sizeof(struct hak_large) <= HAK_LARGE_HEADER, "the header fits before the block");

/* A span cut to size for a smaller block (hak_large_alloc) gives back the
 * pages its old block wrote past the new block's end when they come to
 * this much or more. GNU sort -S 30M frees its 30 MiB buffer, then takes
 * five 6 MiB ones: without the cut and this purge its peak RSS was 63,508
 * KiB, glibc's 32,564 (docs/PERFORMANCE.md, session 13). On another
 * input its buffers are 5 MiB + 32 B, which leaves 1,044,480 bytes past
 * each: at 1 MiB they stayed, 37,864 KiB against 33,892 at 512 KiB
 * (glibc 32,628; session 20). Spans taken whole keep their pages: a first
 * version that purged on every reuse ran random sizes of 0.3-2 MiB at 0.4
 * of the speed. */
#define HAK_LARGE_SLACK_MAX ((size_t)1 << 19)

unsigned hak_large_readers;

/* After a span left the chunk map, before its pages go or move (large.h). */
static void readers_wait(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    while (__atomic_load_n(&hak_large_readers, __ATOMIC_ACQUIRE)) hak_os_yield();
}

static struct {
    hak_spinlock_t lock;
    struct hak_large *cache;    /* most recently freed first */
    size_t cached_bytes;
    struct hak_large_stats st;
} large = { .lock = HAK_SPINLOCK_INIT };

/* Offset of the user block from the span start for this alignment. */
static size_t user_offset(size_t align) {
    return align > HAK_LARGE_HEADER ? align : HAK_LARGE_HEADER;
}

static size_t span_for(size_t size, size_t align) {
    size_t off = user_offset(align);
    if (size < HAK_ALIGNMENT) size = HAK_ALIGNMENT;   /* the block must lie inside the span */
    if (size > SIZE_MAX - off - HAK_CHUNK_SIZE) return 0;
    return hak_align_up(size + off, HAK_CHUNK_SIZE);
}

/* The block of `reach` bytes from the span's start (its usable end, a
 * page multiple) goes out at the offset for align. */
static void publish(struct hak_large *h, size_t span, size_t align, size_t reach) {
    h->magic = HAK_LARGE_MAGIC;
    h->span = span;
    h->user = (char *)h + user_offset(align);
    h->usable = reach - user_offset(align);
    h->next = NULL;
    if (h->dirty < reach) h->dirty = reach;
}

/* Usable end of a block of size bytes at offset off: the end of its last
 * page, so that what the program may write stays below the span's dirty
 * mark (and a realloc within that page stays in place). */
static size_t reach_for(size_t off, size_t size) {
    return hak_align_up(off + size, HAK_PAGE_SIZE);
}

/* Gives back the written pages of span h from byte `from` of it on (never
 * its header's page). */
static void purge_from(struct hak_large *h, size_t from) {
    size_t pg = hak_os_page_size();
    size_t start = hak_align_up(from > HAK_LARGE_HEADER ? from : HAK_LARGE_HEADER, pg);
    size_t end = hak_align_up(h->dirty, pg);
    if (end > h->mapped) end = h->mapped;
    if (end <= start) return;
    hak_os_purge((char *)h + start, end - start);
    h->dirty = start;
    __atomic_fetch_add(&large.st.purges, 1, __ATOMIC_RELAXED);
}

/* Puts a span that is no block into the cache, most recent first. The
 * caller holds the lock. */
static void cache_push_locked(struct hak_large *h) {
    h->user = NULL;
    h->next = large.cache;
    large.cache = h;
    large.cached_bytes += h->mapped;
}

/* Takes the cached span *pp out of the cache, for a block; the caller
 * holds the lock. */
static struct hak_large *cache_unlink_locked(struct hak_large **pp) {
    struct hak_large *h = *pp;
    *pp = h->next;
    large.cached_bytes -= h->mapped;
    large.st.cache_hits++;
    return h;
}

/* The cached span with the fewest mapped bytes, at least `reach`, at
 * this alignment (the most recently freed among equals), out of the cache. */
static struct hak_large *cache_take(size_t reach, size_t align) {
    struct hak_large **best = NULL;
    hak_spin_lock(&large.lock);
    for (struct hak_large **pp = &large.cache; *pp; pp = &(*pp)->next) {
        struct hak_large *h = *pp;
        if (h->mapped < reach || ((uintptr_t)h & (align - 1)) != 0) continue;
        if (!best || h->mapped < (*best)->mapped) best = pp;
        if (h->mapped == reach) break;
    }
    struct hak_large *h = best ? cache_unlink_locked(best) : NULL;
    hak_spin_unlock(&large.lock);
    return h;
}

/* Cuts span h (out of the cache) down to `span` bytes (it has more
 * mapped); the rest becomes a span of its own, cached, with the same age
 * and its share of the written pages (its header's page at least). */
static void split_off(struct hak_large *h, size_t span) {
    struct hak_large *rest = (struct hak_large *)((char *)h + span);
    hak_track_reuse(rest, sizeof *rest);   /* it lies in the freed block */
    rest->magic = HAK_LARGE_MAGIC;
    rest->span = h->span - span;
    rest->mapped = h->mapped - span;
    h->mapped = span;
    rest->usable = 0;
    rest->dirty = h->dirty > span + HAK_PAGE_SIZE ? h->dirty - span : HAK_PAGE_SIZE;
    rest->freed_ms = h->freed_ms;
    if (h->dirty > span) h->dirty = span;
    h->span = span;
    hak_chunk_map_set(rest, rest->span, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
    hak_spin_lock(&large.lock);
    cache_push_locked(rest);
    large.st.splits++;
    hak_spin_unlock(&large.lock);
}

/* With no cached span large enough: the cached span at this alignment with
 * the most written pages, if it has HAK_LARGE_SLACK_MAX or more, out of
 * the cache (growing in place keeps its address). Moving
 * them into the new block beats faulting in new pages while they stay
 * resident for a later request that may never come (sort -S 50M frees
 * its 50 MiB buffer, then takes three 17 MiB ones: the third finds a
 * 16 MiB rest, 14 MiB of it written). */
static struct hak_large *cache_take_written(size_t align) {
    struct hak_large **best = NULL;
    hak_spin_lock(&large.lock);
    for (struct hak_large **pp = &large.cache; *pp; pp = &(*pp)->next)
        if ((*pp)->dirty >= HAK_LARGE_SLACK_MAX && ((uintptr_t)*pp & (align - 1)) == 0 &&
            (!best || (*pp)->dirty > (*best)->dirty))
            best = pp;
    struct hak_large *h = best ? cache_unlink_locked(best) : NULL;
    hak_spin_unlock(&large.lock);
    return h;
}

/* Grows span h (out of the cache) to `span` bytes at an address aligned
 * to align, moving its pages (mremap, no copy); NULL, with h cached again,
 * if the OS refuses. */
static struct hak_large *grow_span(struct hak_large *h, size_t span, size_t align) {
    size_t old = h->span;
    hak_chunk_map_clear(h, old);   /* before the pages move: see hak_large_realloc */
    readers_wait();
    struct hak_large *n = hak_os_remap_aligned(h, h->mapped, span, align);
    if (!n) {
        hak_chunk_map_set(h, old, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
        hak_spin_lock(&large.lock);
        cache_push_locked(h);
        hak_spin_unlock(&large.lock);
        return NULL;
    }
    n->span = n->mapped = span;
    hak_chunk_map_set(n, span, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
    __atomic_fetch_add(&large.st.grown, 1, __ATOMIC_RELAXED);
    return n;
}

/* A new span of `span` bytes at this alignment with only the pages the
 * block reaches mapped (large.h). The whole span is mapped first, then
 * its tail unmapped: the kernel puts a mapping of whole chunks right below
 * the last one, aligned, where one of `reach` bytes went into the top of
 * the previous span's unmapped rest, unaligned, and took an over-sized
 * mapping and two unmaps more (400 live blocks of 270,000 B: 2,192 map
 * calls, against 992 this way; found by review). */
static struct hak_large *map_span(size_t span, size_t reach, size_t align) {
    struct hak_large *h = hak_os_map_aligned(span, align);
    if (!h) return NULL;
    size_t mapped = hak_align_up(reach, hak_os_page_size());
    if (mapped > span) mapped = span;
    if (mapped < span) hak_os_unmap((char *)h + mapped, span - mapped);
    h->mapped = mapped;
    return h;
}

void *hak_large_alloc(size_t size, size_t align, size_t *stale) {
    if (align < HAK_ALIGNMENT) align = HAK_ALIGNMENT;
    size_t span = span_for(size, align);
    if (!span) { errno = ENOMEM; return NULL; }
    size_t off = user_offset(align);
    size_t reach = reach_for(off, size < HAK_ALIGNMENT ? HAK_ALIGNMENT : size);
    /* spans are chunk aligned; a larger alignment puts the block at offset
     * `align` of an align-aligned span */
    size_t map_align = align > HAK_CHUNK_SIZE ? align : HAK_CHUNK_SIZE;
    struct hak_large *h = cache_take(reach, map_align);
    if (!h && (h = cache_take_written(map_align)) != NULL) h = grow_span(h, span, map_align);
    if (h) {
        /* a span at most a quarter larger (plus a chunk) is taken whole, as
         * a program allocating sizes that vary a little would take it
         * again; a larger one was written by a block of another phase:
         * cut to size, and what it wrote past the new block's end goes back */
        if (h->mapped > reach + reach / 4 + HAK_CHUNK_SIZE) {
            split_off(h, span);
            if (h->dirty >= reach + HAK_LARGE_SLACK_MAX) purge_from(h, reach);
        }
        span = h->span;
        if (stale) *stale = h->dirty > off ? h->dirty - off : 0;
    } else {
        h = map_span(span, reach, map_align);
        /* refused: give back what the caches hold and try once more */
        if (!h && (hak_large_release_cache() + hak_ss_pool_release_all()) != 0)
            h = map_span(span, reach, map_align);
        if (!h) { errno = ENOMEM; return NULL; }
        h->dirty = 0;
        if (stale) *stale = 0;
        hak_chunk_map_set(h, span, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
        hak_spin_lock(&large.lock);
        large.st.mapped++;
        hak_spin_unlock(&large.lock);
    }
    publish(h, span, align, reach);
    __atomic_fetch_add(&large.st.live_bytes, h->mapped, __ATOMIC_RELAXED);
    __atomic_fetch_add(&large.st.live_spans, 1, __ATOMIC_RELAXED);
    return h->user;
}

struct hak_large *hak_large_header(const void *p) {
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)HAK_CHUNK_MASK;
    for (;;) {
        unsigned k = hak_chunk_kind((void *)a);
        if (k == HAK_CHUNK_LARGE) break;
        if (k != HAK_CHUNK_LARGE_TAIL) return NULL;
        a -= HAK_CHUNK_SIZE;
    }
    struct hak_large *h = (struct hak_large *)a;
    return h->magic == HAK_LARGE_MAGIC ? h : NULL;
}

/* Unmaps the spans of list (out of the cache, linked by next). */
static void unmap_list(struct hak_large *list) {
    if (!list) return;
    for (struct hak_large *h = list; h; h = h->next) hak_chunk_map_clear(h, h->span);
    readers_wait();
    while (list) {
        struct hak_large *next = list->next;
        hak_os_unmap(list, list->mapped);   /* past it, the chunk may hold another mapping */
        __atomic_fetch_add(&large.st.unmapped, 1, __ATOMIC_RELAXED);
        list = next;
    }
}

/* Bytes of spans the cache keeps: HAKMEM_LARGE_CACHE_MB, or a quarter of
 * the bytes of large blocks in use when that is more. A program with
 * hundreds of MiB in large blocks that it frees, reallocs and allocates
 * again at random sizes finds no span that fits in a fixed 64 MiB, and
 * maps (and faults in) new pages while the cache unmaps written ones:
 * 200 live blocks of 0.25-24 MiB, all written (realloc up and down,
 * free and malloc), made 1,146k page faults and 2.5 s of system time for
 * 4,000 operations, glibc 764k and 1.6 s; with a quarter, 800k and 1.7 s
 * and 1.3 times the throughput, peak RSS 1,570 MiB against 1,421 (glibc
 * 1,512, tcmalloc 1,585; an eighth: 898k faults, 1,492 MiB).
 * Spans that stay unused still give their pages back on the clock
 * (hak_large_decay). */
static size_t cache_limit(void) {
    size_t limit = (size_t)hak_opt(HAK_OPT_LARGE_CACHE_MB) << 20;
    size_t quarter = __atomic_load_n(&large.st.live_bytes, __ATOMIC_RELAXED) / 4;
    return quarter > limit ? quarter : limit;
}

/* Caches span h (no block), unmapping the oldest spans over the limit. */
static void cache_put(struct hak_large *h) {
    size_t limit = cache_limit();
    struct hak_large *evict = NULL;
    hak_spin_lock(&large.lock);
    if (h->mapped <= limit) {
        cache_push_locked(h);   /* a second free of the same block no longer matches */
        while (large.cached_bytes > limit) {
            struct hak_large **pp = &large.cache;
            while ((*pp)->next) pp = &(*pp)->next;
            struct hak_large *old = *pp;
            *pp = NULL;
            large.cached_bytes -= old->mapped;
            old->next = evict;
            evict = old;
        }
    } else {
        h->user = NULL;
        h->next = NULL;
        evict = h;
    }
    hak_spin_unlock(&large.lock);
    unmap_list(evict);
}

void hak_large_free(struct hak_large *h) {
    uint32_t now = hak_os_clock_ms();
    __atomic_fetch_sub(&large.st.live_bytes, h->mapped, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&large.st.live_spans, 1, __ATOMIC_RELAXED);
    h->freed_ms = now;
    cache_put(h);
    /* a program that only allocates large blocks never runs a heap's tick */
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    if (period) hak_large_decay(now, period, 1);
}

/* A cached span's pages go back once it has waited this many decay
 * periods: a large span is refaulted at about a microsecond a page, so a
 * program whose large sizes come back within a fraction of a second keeps
 * them (random sizes of 0.3-8 MiB, 8 live: a single period cost 29% of
 * the throughput for 5% less peak RSS; docs/PERFORMANCE.md, session 13),
 * and one that is done with them gets them back within about 0.3 s. */
#define HAK_LARGE_IDLE_PERIODS 16u

unsigned hak_large_decay(uint32_t now, uint32_t period, unsigned max_calls) {
    struct hak_large *due = NULL, **pp;
    unsigned n = 0;
    uint32_t wait = period < UINT32_MAX / HAK_LARGE_IDLE_PERIODS ? period * HAK_LARGE_IDLE_PERIODS : UINT32_MAX;
    hak_spin_lock(&large.lock);
    for (pp = &large.cache; *pp && n < max_calls;) {
        struct hak_large *h = *pp;
        if (h->dirty > hak_os_page_size() && now - h->freed_ms >= wait) {
            *pp = h->next;
            large.cached_bytes -= h->mapped;
            h->next = due;
            due = h;
            n++;
        } else {
            pp = &h->next;
        }
    }
    hak_spin_unlock(&large.lock);
    if (!due) return 0;
    /* purged outside the lock (a large span takes a while), then cached again */
    struct hak_large *last = due;
    size_t bytes = 0;
    for (struct hak_large *h = due; h; h = h->next) {
        purge_from(h, HAK_LARGE_HEADER);
        bytes += h->mapped;
        last = h;
    }
    hak_spin_lock(&large.lock);
    last->next = large.cache;
    large.cache = due;
    large.cached_bytes += bytes;
    hak_spin_unlock(&large.lock);
    return n;
}

void *hak_large_realloc(struct hak_large *h, size_t size) {
    size_t off = (size_t)((char *)h->user - (char *)h);
    if (size > SIZE_MAX - off - HAK_CHUNK_SIZE) { errno = ENOMEM; return NULL; }
    size_t span = hak_align_up(size + off, HAK_CHUNK_SIZE), reach = reach_for(off, size);
    if (reach <= h->mapped) {
        if (span < h->span) {
            /* shrink in place: give the tail chunks back */
            size_t old = h->mapped;
            hak_chunk_map_clear((char *)h + span, h->span - span);
            if (old > span) {
                hak_os_unmap((char *)h + span, old - span);
                h->mapped = span;
            }
            h->span = span;
            if (h->dirty > span) h->dirty = span;
            __atomic_fetch_sub(&large.st.live_bytes, old - h->mapped, __ATOMIC_RELAXED);
        }
        h->usable = reach - off;
        if (h->dirty < reach) h->dirty = reach;
        return h->user;
    }
    /* grown to whole chunks (in place when the rest of the last one is
     * free, as it mostly is): a block that grows by a little at a time
     * then moves or remaps once a chunk */
    size_t old = h->span, old_mapped = h->mapped;
    /* an offset of a chunk or more is the block's own alignment (see
     * user_offset), which the new span must then keep */
    size_t align = off >= HAK_CHUNK_SIZE ? off : HAK_CHUNK_SIZE;
    /* The old range stops being ours the moment mremap moves the pages, and
     * another thread may map a SuperSlab there at once: its map entries must
     * be cleared before, never after. (Only this thread can free the block,
     * so nobody looks them up meanwhile.) */
    hak_chunk_map_clear(h, old);
    readers_wait();
    struct hak_large *n = hak_os_remap_aligned(h, old_mapped, span, align);
    if (!n) {
        hak_chunk_map_set(h, old, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
        errno = ENOMEM;
        return NULL;
    }
    hak_chunk_map_set(n, span, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
    n->span = n->mapped = span;
    n->user = (char *)n + off;
    n->usable = reach - off;
    if (n->dirty < reach) n->dirty = reach;   /* the pages past the old span are new */
    __atomic_fetch_add(&large.st.live_bytes, span - old_mapped, __ATOMIC_RELAXED);
    __atomic_fetch_add(&large.st.remaps, 1, __ATOMIC_RELAXED);
    return n->user;
}

size_t hak_large_release_cache(void) {
    hak_spin_lock(&large.lock);
    struct hak_large *list = large.cache;
    size_t bytes = large.cached_bytes;
    large.cache = NULL;
    large.cached_bytes = 0;
    hak_spin_unlock(&large.lock);
    unmap_list(list);
    return bytes;
}

void hak_large_fork_prepare(void) { hak_spin_lock(&large.lock); }
void hak_large_fork_parent(void) { hak_spin_unlock(&large.lock); }
/* Threads that were reading a span header when another forked do not
 * exist in the child, and their count would make its every unmap wait
 * for good (the forking thread, running this, reads none). */
void hak_large_fork_child(void) {
    __atomic_store_n(&hak_large_readers, 0, __ATOMIC_RELAXED);
    hak_spin_unlock(&large.lock);
}

void hak_large_stats(struct hak_large_stats *out) {
    hak_spin_lock(&large.lock);
    *out = large.st;
    out->cached_bytes = large.cached_bytes;
    hak_spin_unlock(&large.lock);
}
