#include "backend/large.h"
#include "backend/chunk_map.h"
#include "backend/os.h"
#include "backend/superslab.h"
#include "core/options.h"

#include <errno.h>
#include <string.h>

#define HAK_LARGE_HEADER 64

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

static void publish(struct hak_large *h, size_t span, size_t align) {
    h->magic = HAK_LARGE_MAGIC;
    h->span = span;
    h->user = (char *)h + user_offset(align);
    h->usable = span - user_offset(align);
    h->next = NULL;
}

/* A cached span fits when it is at least as large and at most a quarter
 * larger (plus one chunk), so reuse never pins much more memory. */
static struct hak_large *cache_take(size_t span, size_t align) {
    struct hak_large *prev = NULL, *h;
    hak_spin_lock(&large.lock);
    for (h = large.cache; h; prev = h, h = h->next) {
        if (h->span < span || h->span > span + span / 4 + HAK_CHUNK_SIZE) continue;
        if (((uintptr_t)h & (align - 1)) != 0) continue;
        if (prev) prev->next = h->next; else large.cache = h->next;
        large.cached_bytes -= h->span;
        large.st.cache_hits++;
        break;
    }
    hak_spin_unlock(&large.lock);
    return h;
}

void *hak_large_alloc(size_t size, size_t align, int *reused) {
    if (align < HAK_ALIGNMENT) align = HAK_ALIGNMENT;
    size_t span = span_for(size, align);
    if (!span) { errno = ENOMEM; return NULL; }
    /* spans are chunk aligned; a larger alignment puts the block at offset
     * `align` of an align-aligned span */
    size_t map_align = align > HAK_CHUNK_SIZE ? align : HAK_CHUNK_SIZE;
    struct hak_large *h = cache_take(span, map_align);
    if (reused) *reused = h != NULL;
    if (h) {
        span = h->span;
    } else {
        h = hak_os_map_aligned(span, map_align);
        /* refused: give back what the caches hold and try once more */
        if (!h && (hak_large_release_cache() + hak_ss_pool_release_all()) != 0)
            h = hak_os_map_aligned(span, map_align);
        if (!h) { errno = ENOMEM; return NULL; }
        hak_chunk_map_set(h, span, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
        hak_spin_lock(&large.lock);
        large.st.mapped++;
        hak_spin_unlock(&large.lock);
    }
    publish(h, span, align);
    __atomic_fetch_add(&large.st.live_bytes, span, __ATOMIC_RELAXED);
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

void hak_large_free(struct hak_large *h) {
    size_t span = h->span;
    size_t limit = (size_t)hak_opt(HAK_OPT_LARGE_CACHE_MB) << 20;
    __atomic_fetch_sub(&large.st.live_bytes, span, __ATOMIC_RELAXED);
    h->user = NULL;   /* a second free of the same block no longer matches */
    struct hak_large *evict = NULL;
    hak_spin_lock(&large.lock);
    if (span <= limit) {
        h->next = large.cache;
        large.cache = h;
        large.cached_bytes += span;
        /* over the limit: unmap the oldest spans */
        while (large.cached_bytes > limit) {
            struct hak_large **pp = &large.cache;
            while ((*pp)->next) pp = &(*pp)->next;
            struct hak_large *old = *pp;
            *pp = NULL;
            large.cached_bytes -= old->span;
            old->next = evict;
            evict = old;
        }
    } else {
        h->next = NULL;
        evict = h;
    }
    hak_spin_unlock(&large.lock);
    while (evict) {
        struct hak_large *next = evict->next;
        size_t s = evict->span;
        hak_chunk_map_clear(evict, s);
        hak_os_unmap(evict, s);
        __atomic_fetch_add(&large.st.unmapped, 1, __ATOMIC_RELAXED);
        evict = next;
    }
}

void *hak_large_realloc(struct hak_large *h, size_t size) {
    size_t off = (size_t)((char *)h->user - (char *)h);
    if (size > SIZE_MAX - off - HAK_CHUNK_SIZE) { errno = ENOMEM; return NULL; }
    size_t span = hak_align_up(size + off, HAK_CHUNK_SIZE);
    if (span == h->span) return h->user;
    if (span < h->span) {
        /* shrink in place: give the tail chunks back */
        size_t old = h->span;
        hak_chunk_map_clear((char *)h + span, old - span);
        hak_os_unmap((char *)h + span, old - span);
        h->span = span;
        h->usable = span - off;
        __atomic_fetch_sub(&large.st.live_bytes, old - span, __ATOMIC_RELAXED);
        return h->user;
    }
    size_t old = h->span;
    /* an offset of a chunk or more is the block's own alignment (see
     * user_offset), which the new span must then keep */
    size_t align = off >= HAK_CHUNK_SIZE ? off : HAK_CHUNK_SIZE;
    /* The old range stops being ours the moment mremap moves the pages, and
     * another thread may map a SuperSlab there at once: its map entries must
     * be cleared before, never after. (Only this thread can free the block,
     * so nobody looks them up meanwhile.) */
    hak_chunk_map_clear(h, old);
    struct hak_large *n = hak_os_remap_aligned(h, old, span, align);
    if (!n) {
        hak_chunk_map_set(h, old, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
        errno = ENOMEM;
        return NULL;
    }
    hak_chunk_map_set(n, span, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
    n->span = span;
    n->user = (char *)n + off;
    n->usable = span - off;
    __atomic_fetch_add(&large.st.live_bytes, span - old, __ATOMIC_RELAXED);
    __atomic_fetch_add(&large.st.remaps, 1, __ATOMIC_RELAXED);
    return n->user;
}

size_t hak_large_release_cache(void) {
    hak_spin_lock(&large.lock);
    struct hak_large *list = large.cache;
    large.cache = NULL;
    large.cached_bytes = 0;
    hak_spin_unlock(&large.lock);
    size_t bytes = 0;
    for (struct hak_large *h = list, *next; h; h = next) {
        next = h->next;
        size_t s = h->span;
        bytes += s;
        hak_chunk_map_clear(h, s);
        hak_os_unmap(h, s);
        __atomic_fetch_add(&large.st.unmapped, 1, __ATOMIC_RELAXED);
    }
    return bytes;
}

void hak_large_fork_prepare(void) { hak_spin_lock(&large.lock); }
void hak_large_fork_parent(void) { hak_spin_unlock(&large.lock); }
void hak_large_fork_child(void) { hak_spin_unlock(&large.lock); }

void hak_large_stats(struct hak_large_stats *out) {
    hak_spin_lock(&large.lock);
    *out = large.st;
    out->cached_bytes = large.cached_bytes;
    hak_spin_unlock(&large.lock);
}
