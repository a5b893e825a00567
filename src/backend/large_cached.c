/* The cached large path (backend/large.h): freed spans wait in a small
 * cache for reuse (a larger one is cut to size, the rest stays cached,
 * a smaller one with many written pages is grown); realloc moves pages
 * with mremap instead of copying; cached spans give their pages back on
 * the clock (hak_large_decay). */
#include "backend/large.h"
#include "os/os.h"
#include "backend/superslab.h"
#include "base/options.h"
#include "base/track.h"

#include <errno.h>

/* A span cut to size for a smaller block (hak_large_alloc) gives back the
 * pages its old block wrote past the new block's end when they come to
 * this much or more: a program that frees a large buffer and then takes
 * smaller ones (GNU sort -S) would otherwise keep the old block's written
 * pages beside the new ones. 512 KiB, not 1 MiB, because buffers of
 * 5 MiB + 32 B cut from a larger span leave just under 1 MiB each
 * (docs/PERFORMANCE.md, "The large path"). Spans taken whole keep their pages: a first
 * version that purged on every reuse ran random sizes of 0.3-2 MiB at 0.4
 * of the speed. */
#define HAK_LARGE_SLACK_MAX ((size_t)1 << 19)

static struct {
    hak_spinlock_t lock;
    struct hak_large *cache;    /* most recently freed first */
    size_t cached_bytes;
} large = { .lock = HAK_SPINLOCK_INIT_KIND(HAK_LOCK_LARGE) };

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
    hak_large_count(purges, 1);
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
    hak_large_count(cache_hits, 1);
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
    hak_large_map_add(rest, rest->span);
    hak_spin_lock(&large.lock);
    cache_push_locked(rest);
    hak_large_count(splits, 1);
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
    hak_large_map_remove(h, old);   /* before the pages move: see hak_large_realloc */
    hak_large_readers_wait();
    struct hak_large *n = hak_os_remap_aligned(h, h->mapped, span, align);
    if (!n) {
        hak_large_map_add(h, old);
        hak_spin_lock(&large.lock);
        cache_push_locked(h);
        hak_spin_unlock(&large.lock);
        return NULL;
    }
    n->span = n->mapped = span;
    hak_large_map_add(n, span);
    hak_large_count(grown, 1);
    return n;
}

static size_t cached_release(void);

static void *cached_alloc(size_t size, size_t align, size_t *stale) {
    if (align < HAK_ALIGNMENT) align = HAK_ALIGNMENT;
    size_t span = hak_large_span_for(size, align);
    if (!span) { errno = ENOMEM; return NULL; }
    size_t off = hak_large_user_offset(align);
    size_t reach = hak_large_reach_for(off, size < HAK_ALIGNMENT ? HAK_ALIGNMENT : size);
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
        h = hak_large_map_span(span, reach, map_align);
        /* refused: give back what the caches hold and try once more */
        if (!h && (cached_release() + hak_ss_pool_release_all()) != 0)
            h = hak_large_map_span(span, reach, map_align);
        if (!h) { errno = ENOMEM; return NULL; }
        h->dirty = 0;
        if (stale) *stale = 0;
        hak_large_map_add(h, span);
        hak_large_count(mapped, 1);
    }
    hak_large_publish(h, span, align, reach);
    hak_large_count(live_bytes, h->mapped);
    hak_large_count(live_spans, 1);
    return h->user;
}

/* Unmaps the spans of list (out of the cache, linked by next). */
static void unmap_list(struct hak_large *list) {
    if (!list) return;
    for (struct hak_large *h = list; h; h = h->next) hak_large_map_remove(h, h->span);
    hak_large_readers_wait();
    while (list) {
        struct hak_large *next = list->next;
        hak_os_unmap(list, list->mapped);   /* past it, the chunk may hold another mapping */
        hak_large_count(unmapped, 1);
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
    size_t quarter = __atomic_load_n(&hak_large_st.live_bytes, __ATOMIC_RELAXED) / 4;
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

static unsigned cached_decay(uint32_t now, uint32_t period, unsigned max_calls);

static void cached_free(struct hak_large *h) {
    uint32_t now = hak_os_clock_ms();
    hak_large_uncount(live_bytes, h->mapped);
    hak_large_uncount(live_spans, 1);
    h->freed_ms = now;
    cache_put(h);
    /* a program that only allocates large blocks never runs a heap's tick */
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    if (period) cached_decay(now, period, 1);
}

/* A cached span's pages go back once it has waited this many decay
 * periods: a large span is refaulted at about a microsecond a page, so a
 * program whose large sizes come back within a fraction of a second keeps
 * them (a single period cost far more throughput than it saved memory;
 * docs/PERFORMANCE.md, "The large path"), and one that is done with them
 * gets them back within about 0.3 s. */
#define HAK_LARGE_IDLE_PERIODS 16u

static unsigned cached_decay(uint32_t now, uint32_t period, unsigned max_calls) {
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

static void *cached_realloc(struct hak_large *h, size_t size) {
    size_t off = (size_t)((char *)h->user - (char *)h);
    if (size > SIZE_MAX - off - HAK_CHUNK_SIZE) { errno = ENOMEM; return NULL; }
    size_t span = hak_align_up(size + off, HAK_CHUNK_SIZE), reach = hak_large_reach_for(off, size);
    if (reach <= h->mapped) {
        if (span < h->span) {
            /* shrink in place: give the tail chunks back */
            size_t old = h->mapped;
            hak_large_map_remove((char *)h + span, h->span - span);
            if (old > span) {
                hak_os_unmap((char *)h + span, old - span);
                h->mapped = span;
            }
            h->span = span;
            if (h->dirty > span) h->dirty = span;
            hak_large_uncount(live_bytes, old - h->mapped);
        }
        h->usable = reach - off;
        if (h->dirty < reach) h->dirty = reach;
        return h->user;
    }
    /* grown to whole chunks (in place when the rest of the last one is
     * free, as it mostly is): a block that grows by a little at a time
     * then moves or remaps once a chunk */
    struct hak_large *n = hak_large_remap(h, span, span, reach);
    return n ? n->user : NULL;
}

static size_t cached_release(void) {
    hak_spin_lock(&large.lock);
    struct hak_large *list = large.cache;
    size_t bytes = large.cached_bytes;
    large.cache = NULL;
    large.cached_bytes = 0;
    hak_spin_unlock(&large.lock);
    unmap_list(list);
    return bytes;
}

static size_t cached_bytes(void) {
    return __atomic_load_n(&large.cached_bytes, __ATOMIC_RELAXED);
}

static void cached_fork_prepare(void) { hak_spin_fork_take(&large.lock); }
static void cached_fork_parent(void) { hak_spin_fork_release(&large.lock); }
static void cached_fork_child(void) { hak_spin_fork_release(&large.lock); }

const struct hak_large_ops hak_large_cached = {
    .name = "cached",
    .alloc = cached_alloc,
    .free = cached_free,
    .realloc = cached_realloc,
    .release_cache = cached_release,
    .decay = cached_decay,
    .cached_bytes = cached_bytes,
    .fork_prepare = cached_fork_prepare,
    .fork_parent = cached_fork_parent,
    .fork_child = cached_fork_child,
};
