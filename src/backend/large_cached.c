/* The cached large path (backend/large.h): freed spans wait in a cache
 * with their written pages; a block takes a span of about its size whole,
 * else gets a span of its own into which the written pages of cached
 * spans are moved (mremap, no copy, no page fault); realloc moves pages
 * with mremap instead of copying; cached spans give their pages back on
 * the clock (hak_large_decay). */
#include "backend/large.h"
#include "os/os.h"
#include "backend/superslab.h"
#include "base/options.h"
#include "base/track.h"

#include <errno.h>

/* Moving pages between spans (fill_from_cache, carve_top) stops while the
 * process has more than HAK_LARGE_MAX_MAPS mappings (VMAs), counted once
 * every HAK_LARGE_MAPS_EVERY moves: the kernel merges no two mappings
 * whose pages came from different ones, so a block pieced together from
 * several spans is several mappings, and spans pieced together, cut and
 * pieced again split the address space into more and more of them
 * (large_churn: 494 after 500 steps, 1,906 after 5,000, 2,723 after
 * 20,000), towards the kernel's limit (vm.max_map_count, 65,530 by
 * default), where every mmap fails. A quarter of that default leaves the
 * program most of it; the pages are faulted in instead meanwhile, and
 * the pieced spans go as the cache unmaps them. */
#define HAK_LARGE_MAX_MAPS 16384
#define HAK_LARGE_MAPS_EVERY 256u
/* Pages move only a chunk (2 MiB) or more at a time. A move takes the
 * process's mmap lock for writing and shoots down the TLB entries of
 * every CPU running one of its threads: with threads that fault and map
 * meanwhile it costs more than faulting in a few hundred KiB (oversub_8,
 * blocks of 16 B-1 MiB over 8 threads, ran 2-4 times slower moving its
 * cut-off pieces), while the blocks of MiBs that large_churn replaces
 * keep the gain. */
#define HAK_LARGE_MOVE_MIN HAK_CHUNK_SIZE

static struct {
    hak_spinlock_t lock;
    struct hak_large *cache;    /* most recently freed first */
    size_t cached_bytes;
    /* The footprint's recent peak (note_peak), and when it was set:
     * cache_limit. */
    size_t peak;
    uint32_t peak_ms;
    unsigned moves;     /* moves asked for: HAK_LARGE_MAPS_EVERY */
    int moves_off;      /* too many mappings to make more */
} large = { .lock = HAK_SPINLOCK_INIT_KIND(HAK_LOCK_LARGE) };

/* cached_bytes changes under the lock only, and is read without it
 * (note_peak, the stats): a relaxed atomic store, so such a read sees a
 * whole value. */
static void cached_set(size_t bytes) {
    __atomic_store_n(&large.cached_bytes, bytes, __ATOMIC_RELAXED);
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
    hak_large_count(purges, 1);
}

/* Puts a span that is no block into the cache, most recent first. The
 * caller holds the lock. */
static void cache_push_locked(struct hak_large *h) {
    h->user = NULL;
    h->next = large.cache;
    large.cache = h;
    cached_set(large.cached_bytes + h->mapped);
}

/* Takes the cached span *pp out of the cache, for a block; the caller
 * holds the lock. */
static struct hak_large *cache_unlink_locked(struct hak_large **pp) {
    struct hak_large *h = *pp;
    *pp = h->next;
    cached_set(large.cached_bytes - h->mapped);
    hak_large_count(cache_hits, 1);
    return h;
}

/* A cached span at this alignment that a block reaching `reach` bytes
 * takes whole, out of the cache: the one with the fewest mapped bytes, at
 * least reach and at most a quarter more plus a chunk (the most recently
 * freed among equals). A program allocating sizes that vary a little
 * takes its spans back so, without a system call. */
static struct hak_large *cache_take(size_t reach, size_t align) {
    size_t most = reach + reach / 4 + HAK_CHUNK_SIZE;
    struct hak_large **best = NULL;
    hak_spin_lock(&large.lock);
    for (struct hak_large **pp = &large.cache; *pp; pp = &(*pp)->next) {
        struct hak_large *h = *pp;
        if (h->mapped < reach || h->mapped > most || ((uintptr_t)h & (align - 1)) != 0) continue;
        if (!best || h->mapped < (*best)->mapped) best = pp;
        if (h->mapped == reach) break;
    }
    struct hak_large *h = best ? cache_unlink_locked(best) : NULL;
    hak_spin_unlock(&large.lock);
    return h;
}

static void cache_put(struct hak_large *h);

/* Cuts live span h down to `span` bytes (it has more mapped); the rest
 * becomes a span of its own, cached, with h's age and its share of the
 * written pages (its header's page at least). */
static void split_off(struct hak_large *h, size_t span) {
    struct hak_large *rest = (struct hak_large *)((char *)h + span);
    hak_track_reuse(rest, sizeof *rest);   /* it lies in the block */
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
    hak_large_count(splits, 1);
    cache_put(rest);
}

/* Bytes from cached span h's start whose pages blocks wrote and no
 * purge gave back: resident, or as good as (a page written once). */
static size_t resident_of(const struct hak_large *h) {
    size_t d = hak_align_up(h->dirty, hak_os_page_size());
    return d < h->mapped ? d : h->mapped;
}

/* Whether pages may move between spans now (HAK_LARGE_MAX_MAPS); counts
 * the mappings on the first call and every HAK_LARGE_MAPS_EVERY after.
 * Not knowing the count, it stops them. */
static int moves_allowed(void) {
    unsigned k = __atomic_fetch_add(&large.moves, 1, __ATOMIC_RELAXED);
    if (k % HAK_LARGE_MAPS_EVERY == 0) {
        long maps = hak_os_count_maps();
        __atomic_store_n(&large.moves_off, maps < 0 || maps > HAK_LARGE_MAX_MAPS, __ATOMIC_RELAXED);
    }
    return !__atomic_load_n(&large.moves_off, __ATOMIC_RELAXED);
}

/* Moves written pages of cached spans onto bytes [from, to) of span n
 * (out of the cache, mapped there, page aligned), so that a block
 * reaching there finds them resident instead of faulting in zero pages
 * while those wait to be purged: mremap moves page tables, no copy, no
 * fault. A span is taken whole when it fits, else the top of its written
 * pages (it keeps the rest and its header). Returns the end of what was
 * filled (from when nothing was). Without this a block larger than every
 * cached span mapped and faulted all its pages in while the cache held
 * as many written ones: large_churn (docs/PERFORMANCE.md, "The large
 * path") faulted 409k pages for 886 calls. */
static size_t fill_from_cache(struct hak_large *n, size_t from, size_t to) {
    if (to < from + HAK_LARGE_MOVE_MIN || !moves_allowed()) return from;
    size_t pg = hak_os_page_size(), start = from;
    int filled = 0;
    from = hak_align_up(from > pg ? from : pg, pg);
    if (to > n->mapped) to = n->mapped;
    while (from < to) {
        size_t need = to - from;
        struct hak_large **best = NULL;
        size_t best_res = 0;
        hak_spin_lock(&large.lock);
        /* the smallest that covers the need (one move), else the largest */
        for (struct hak_large **pp = &large.cache; *pp; pp = &(*pp)->next) {
            size_t r = resident_of(*pp);
            if (r <= pg) continue;   /* its header's page only */
            if (!best || (best_res < need ? r > best_res : (r >= need && r < best_res))) {
                best = pp;
                best_res = r;
            }
        }
        struct hak_large *b = best ? cache_unlink_locked(best) : NULL;
        hak_spin_unlock(&large.lock);
        if (!b) break;
        char *dst = (char *)n + from;
        if (best_res <= need) {
            /* the whole span: it leaves the map before its header moves */
            size_t mapped = b->mapped;
            hak_large_map_remove(b, b->span);
            hak_large_readers_wait();
            if (hak_os_move_pages(b, best_res, dst) != 0) {
                hak_large_map_add(b, b->span);
                cache_put(b);
                break;
            }
            if (mapped > best_res) hak_os_unmap((char *)b + best_res, mapped - best_res);
            from += best_res;
            filled = 1;
        } else {
            /* the top of its written pages; what lay above them is only
             * address space, and goes (the span ends below the hole) */
            size_t keep = best_res - need, mapped = b->mapped, span = hak_align_up(keep, HAK_CHUNK_SIZE);
            b->mapped = keep;     /* before the pages go: past it, the chunk is anyone's */
            b->dirty = keep;
            if (span < b->span) {
                hak_large_map_remove((char *)b + span, b->span - span);
                b->span = span;
            }
            if (hak_os_move_pages((char *)b + keep, need, dst) != 0) {
                hak_os_unmap((char *)b + keep, mapped - keep);   /* the pages stay no one's */
                cache_put(b);
                break;
            }
            if (mapped > best_res) hak_os_unmap((char *)b + best_res, mapped - best_res);
            hak_large_count(splits, 1);
            cache_put(b);
            from = to;
            filled = 1;
        }
    }
    if (!filled) return start;
    hak_large_count(grown, 1);
    return from;
}

/* With no span of about its size cached: the cached span at this
 * alignment with the fewest written pages that still holds `reach` bytes
 * of them, out of the cache, when it holds less than twice that (moving
 * its rest out, carve_top, then moves fewer pages than moving the
 * block's into a span of its own). */
static struct hak_large *cache_take_covering(size_t reach, size_t align) {
    struct hak_large **best = NULL;
    size_t best_res = 0;
    hak_spin_lock(&large.lock);
    for (struct hak_large **pp = &large.cache; *pp; pp = &(*pp)->next) {
        size_t r = resident_of(*pp);
        if (r < reach || ((uintptr_t)*pp & (align - 1)) != 0) continue;
        if (!best || r < best_res) {
            best = pp;
            best_res = r;
        }
    }
    struct hak_large *h = best && best_res - reach < reach ? cache_unlink_locked(best) : NULL;
    hak_spin_unlock(&large.lock);
    return h;
}

/* Moves the written pages of span h (out of the cache) past `keep` (page
 * aligned) to a new span, cached with h's age; h ends at keep. -1, h as
 * it was, when the OS refuses. */
static int carve_top(struct hak_large *h, size_t keep) {
    size_t res = resident_of(h), len = res - keep, span = hak_align_up(len, HAK_CHUNK_SIZE);
    if (!len) return 0;
    if (len < HAK_LARGE_MOVE_MIN || !moves_allowed()) return -1;
    struct hak_large *t = hak_large_map_span(span, len, HAK_CHUNK_SIZE);
    if (!t) return -1;
    size_t mapped = h->mapped;
    h->mapped = keep;   /* before the pages go: past it, the chunk is anyone's */
    if (hak_os_move_pages((char *)h + keep, len, t) != 0) {
        h->mapped = mapped;
        hak_os_unmap(t, t->mapped);
        return -1;
    }
    if (mapped > res) hak_os_unmap((char *)h + res, mapped - res);
    size_t hspan = hak_align_up(keep, HAK_CHUNK_SIZE);
    if (hspan < h->span) {
        hak_large_map_remove((char *)h + hspan, h->span - hspan);
        h->span = hspan;
    }
    if (h->dirty > keep) h->dirty = keep;
    hak_track_reuse(t, sizeof *t);   /* it lies in a freed block's pages */
    t->magic = HAK_LARGE_MAGIC;
    t->span = span;
    t->mapped = len;
    t->user = NULL;
    t->usable = 0;
    t->dirty = len;
    t->freed_ms = h->freed_ms;
    hak_large_map_add(t, span);
    hak_large_count(splits, 1);
    cache_put(t);
    return 0;
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
    if (!h && (h = cache_take_covering(reach, map_align)) != NULL)
        carve_top(h, hak_align_up(reach, hak_os_page_size()));   /* refused: taken whole */
    if (h) {
        span = h->span;
    } else {
        h = hak_large_map_span(span, reach, map_align);
        /* refused: give back what the caches hold and try once more */
        if (!h && (cached_release() + hak_ss_pool_release_all()) != 0)
            h = hak_large_map_span(span, reach, map_align);
        if (!h) { errno = ENOMEM; return NULL; }
        h->dirty = 0;
        hak_large_map_add(h, span);
        hak_large_count(mapped, 1);
    }
    /* the pages no block wrote yet: cached ones moved in, where there are */
    if (h->dirty < reach) {
        size_t filled = fill_from_cache(h, h->dirty, reach);
        if (filled > h->dirty) h->dirty = filled;
    }
    if (stale) *stale = h->dirty > off ? h->dirty - off : 0;
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

/* Bytes of spans the cache keeps: HAKMEM_LARGE_CACHE_MB, a quarter of
 * the bytes of large blocks in use, or what keeps the footprint (those
 * and the cache's) within its recent peak, whichever is most.
 * A quarter: a program with hundreds of MiB in large blocks that it
 * frees, reallocs and allocates again at random sizes finds no span that
 * fits in a fixed 64 MiB, and maps (and faults in) new pages while the
 * cache unmaps written ones: 200 live blocks of 0.25-24 MiB, all written
 * (realloc up and down, free and malloc), made 1,146k page faults and
 * 2.5 s of system time for 4,000 operations, glibc 764k and 1.6 s; with a
 * quarter, 800k and 1.7 s and 1.3 times the throughput, peak RSS 1,570
 * MiB against 1,421 (glibc 1,512, tcmalloc 1,585; an eighth: 898k
 * faults, 1,492 MiB).
 * The peak: new blocks take cached pages before any new one
 * (fill_from_cache), so a cache that keeps the footprint within a peak
 * the program reached anyway costs no memory beyond it, and spares the
 * next blocks faulting in what it would have unmapped: 8 blocks of
 * 0.25-32 MiB replaced at random (large_churn) stay 60-150 MiB below a
 * peak of 190 MiB, and a bound of a quarter of them unmapped a third of
 * the spans freed, whose pages the next blocks faulted in again.
 * Spans that stay unused still give their pages back on the clock
 * (hak_large_decay), and the peak comes down with it (note_peak). */
static size_t cache_limit(void) {
    size_t limit = (size_t)hak_opt(HAK_OPT_LARGE_CACHE_MB) << 20;
    size_t live = __atomic_load_n(&hak_large_st.live_bytes, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&large.peak, __ATOMIC_RELAXED);
    if (live / 4 > limit) limit = live / 4;
    return peak > live && peak - live > limit ? peak - live : limit;
}

/* Caches span h (no block, out of the cache), unmapping the oldest spans
 * over the limit. Its pages past the written ones go first: nothing is
 * lost with them, and the limit then counts written pages, which a
 * mapped but never written tail (a block cut short of its span, a span
 * grown to whole chunks) would otherwise push out. */
static void cache_put(struct hak_large *h) {
    size_t res = resident_of(h), pg = hak_os_page_size();
    if (res < pg) res = pg;
    if (res < h->mapped) {
        size_t mapped = h->mapped, span = hak_align_up(res, HAK_CHUNK_SIZE);
        h->mapped = res;   /* before the pages go: past it, the chunk is anyone's */
        if (span < h->span) {
            hak_large_map_remove((char *)h + span, h->span - span);
            h->span = span;
        }
        hak_os_unmap((char *)h + res, mapped - res);
    }
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
            cached_set(large.cached_bytes - old->mapped);
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

/* A cached span's pages go back once it has waited this many decay
 * periods: a large span is refaulted at about a microsecond a page, so a
 * program whose large sizes come back within a fraction of a second keeps
 * them (a single period cost far more throughput than it saved memory;
 * docs/PERFORMANCE.md, "The large path"), and one that is done with them
 * gets them back within about 0.3 s. */
#define HAK_LARGE_IDLE_PERIODS 16u

static uint32_t idle_wait(uint32_t period) {
    return period < UINT32_MAX / HAK_LARGE_IDLE_PERIODS ? period * HAK_LARGE_IDLE_PERIODS : UINT32_MAX;
}

/* Before bytes of blocks in use go to the cache: the footprint (bytes of
 * blocks in use and of cached spans) becomes the peak when it reaches
 * it, as long as new blocks take the cached pages (fill_from_cache) and
 * the footprint therefore grows only by what the blocks in use need;
 * while pages may not move, the cache would not shrink the footprint,
 * and only the bytes in use count. A peak HAK_LARGE_IDLE_PERIODS decay
 * periods old comes halfway down to the bytes in use, and the cache's
 * bound with it (the clock off: it stays). Racing frees may lose an
 * update: the bound is a heuristic. */
static void note_peak(void) {
    uint32_t now = hak_os_clock_ms(), period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    size_t live = __atomic_load_n(&hak_large_st.live_bytes, __ATOMIC_RELAXED);
    size_t foot = live;
    if (!__atomic_load_n(&large.moves_off, __ATOMIC_RELAXED))
        foot += __atomic_load_n(&large.cached_bytes, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&large.peak, __ATOMIC_RELAXED);
    uint32_t age = now - __atomic_load_n(&large.peak_ms, __ATOMIC_RELAXED);
    if (foot >= peak) peak = foot;
    else if (period && age >= idle_wait(period)) peak = live + (peak - live) / 2;
    else return;
    __atomic_store_n(&large.peak, peak, __ATOMIC_RELAXED);
    __atomic_store_n(&large.peak_ms, now, __ATOMIC_RELAXED);
}

static void cached_free(struct hak_large *h) {
    uint32_t now = hak_os_clock_ms();
    uint32_t period = (uint32_t)hak_opt(HAK_OPT_DECAY_MS);
    note_peak();
    hak_large_uncount(live_bytes, h->mapped);
    hak_large_uncount(live_spans, 1);
    h->freed_ms = now;
    cache_put(h);
    /* a program that only allocates large blocks never runs a heap's tick */
    if (period) cached_decay(now, period, 1);
}

static unsigned cached_decay(uint32_t now, uint32_t period, unsigned max_calls) {
    struct hak_large *due = NULL, **pp;
    unsigned n = 0;
    uint32_t wait = idle_wait(period);
    hak_spin_lock(&large.lock);
    for (pp = &large.cache; *pp && n < max_calls;) {
        struct hak_large *h = *pp;
        if (h->dirty > hak_os_page_size() && now - h->freed_ms >= wait) {
            *pp = h->next;
            cached_set(large.cached_bytes - h->mapped);
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
    cached_set(large.cached_bytes + bytes);
    hak_spin_unlock(&large.lock);
    return n;
}

static void *cached_realloc(struct hak_large *h, size_t size) {
    size_t off = (size_t)((char *)h->user - (char *)h);
    if (size > SIZE_MAX - off - HAK_CHUNK_SIZE) { errno = ENOMEM; return NULL; }
    size_t span = hak_align_up(size + off, HAK_CHUNK_SIZE), reach = hak_large_reach_for(off, size);
    if (reach <= h->mapped) {
        if (span < h->span) {
            /* shrink in place: the tail chunks leave the block; written
             * pages among them are cached, a span of their own, for the
             * next block to move in (fill_from_cache) */
            size_t old = h->mapped;
            if (old > span && h->dirty > span + hak_os_page_size()) {
                h->freed_ms = hak_os_clock_ms();   /* the tail's age */
                note_peak();
                hak_large_uncount(live_bytes, old - span);   /* before it is cached */
                split_off(h, span);
                old = span;
            } else {
                hak_large_map_remove((char *)h + span, h->span - span);
                if (old > span) {
                    h->mapped = span;
                    hak_os_unmap((char *)h + span, old - span);
                }
                h->span = span;
                if (h->dirty > span) h->dirty = span;
            }
            hak_large_uncount(live_bytes, old - h->mapped);
        }
        h->usable = reach - off;
        if (h->dirty < reach) h->dirty = reach;
        return h->user;
    }
    /* grown to whole chunks (in place when the rest of the last one is
     * free, as it mostly is): a block that grows by a little at a time
     * then moves or remaps once a chunk */
    size_t written = h->dirty;
    struct hak_large *n = hak_large_remap(h, span, span, reach);
    if (!n) return NULL;
    /* the growth: written pages of cached spans where there are some */
    fill_from_cache(n, written, reach);
    return n->user;
}

static size_t cached_release(void) {
    hak_spin_lock(&large.lock);
    struct hak_large *list = large.cache;
    size_t bytes = large.cached_bytes;
    large.cache = NULL;
    cached_set(0);
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
