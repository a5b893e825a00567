/* The direct large path (backend/large.h): every large block is its own
 * mapping, in the shared span layout (so ownership checks,
 * malloc_usable_size and the safety boxes see it as any span), unmapped
 * at free and resized by mremap to the page: nothing is kept for reuse,
 * so the process holds no pages of large blocks it freed or shrank. The
 * price is a map (and often an unmap of an unaligned try, os.c) per
 * block and an unmap per free, where the cached path reuses spans. */
#include "backend/large.h"
#include "os/os.h"

#include <errno.h>

static void *direct_alloc(size_t size, size_t align, size_t *stale) {
    if (align < HAK_ALIGNMENT) align = HAK_ALIGNMENT;
    size_t span = hak_large_span_for(size, align);
    if (!span) { errno = ENOMEM; return NULL; }
    size_t off = hak_large_user_offset(align);
    size_t reach = hak_large_reach_for(off, size < HAK_ALIGNMENT ? HAK_ALIGNMENT : size);
    /* a larger alignment than a chunk puts the block at offset `align` of
     * an align-aligned span */
    struct hak_large *h = hak_large_map_span(span, reach, align > HAK_CHUNK_SIZE ? align : HAK_CHUNK_SIZE);
    /* refused: the caller gives back what the caches hold and asks again */
    if (!h) { errno = ENOMEM; return NULL; }
    h->dirty = 0;
    if (stale) *stale = 0;   /* a fresh mapping reads as zeros */
    hak_large_map_add(h, span);
    hak_large_publish(h, span, align, reach);
    hak_large_count(mapped, 1);
    hak_large_count(live_bytes, h->mapped);
    hak_large_count(live_spans, 1);
    return h->user;
}

static void direct_free(struct hak_large *h) {
    hak_large_uncount(live_bytes, h->mapped);
    hak_large_uncount(live_spans, 1);
    /* out of the chunk map before the pages go (large.h) */
    hak_large_map_remove(h, h->span);
    hak_large_readers_wait();
    hak_os_unmap(h, h->mapped);   /* past it, the chunk may hold another mapping */
    hak_large_count(unmapped, 1);
}

static void *direct_realloc(struct hak_large *h, size_t size) {
    size_t off = (size_t)((char *)h->user - (char *)h);
    if (size > SIZE_MAX - off - HAK_CHUNK_SIZE) { errno = ENOMEM; return NULL; }
    size_t span = hak_align_up(size + off, HAK_CHUNK_SIZE), reach = hak_large_reach_for(off, size);
    size_t want = hak_align_up(reach, hak_os_page_size());   /* bytes to map from the span's start */
    if (want <= h->mapped) {
        /* shrink in place: the pages past the block and the chunks past
         * its span go back at once (its header's page stays, so no reader
         * needs waiting for) */
        if (span < h->span) {
            hak_large_map_remove((char *)h + span, h->span - span);
            h->span = span;
        }
        if (want < h->mapped) {
            hak_os_unmap((char *)h + want, h->mapped - want);
            hak_large_uncount(live_bytes, h->mapped - want);
            h->mapped = want;
        }
        h->usable = reach - off;
        if (h->dirty > want) h->dirty = want;
        return h->user;
    }
    /* grown to the page, in place when the addresses past it are free,
     * else moved without a copy */
    struct hak_large *n = hak_large_remap(h, span, want, reach);
    return n ? n->user : NULL;
}

/* Nothing is kept: nothing to give back, purge or count. */
static size_t direct_release(void) { return 0; }
static unsigned direct_decay(uint32_t now, uint32_t period, unsigned max_calls) {
    (void)now, (void)period, (void)max_calls;
    return 0;
}
static size_t direct_cached_bytes(void) { return 0; }

const struct hak_large_ops hak_large_direct = {
    .name = "direct",
    .alloc = direct_alloc,
    .free = direct_free,
    .realloc = direct_realloc,
    .release_cache = direct_release,
    .decay = direct_decay,
    .cached_bytes = direct_cached_bytes,
};
