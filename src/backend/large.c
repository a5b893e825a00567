/* What both large-path implementations share (backend/large.h): the span
 * layout and its place in the chunk map, the header lookup for the safety
 * boxes and their readers count, the counters. */
#include "backend/large.h"
#include "backend/chunk_map.h"
#include "os/os.h"

#include <errno.h>
#include <string.h>

_Static_assert(sizeof(struct hak_large) <= HAK_LARGE_HEADER, "the header fits before the block");

/* The chosen box (api/init.c sets it at init); cached until then. */
const struct hak_large_ops *hak_large_box = &hak_large_cached;
unsigned hak_large_readers;
struct hak_large_stats hak_large_st;

/* After a span left the chunk map, before its pages go or move (large.h). */
void hak_large_readers_wait(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    while (__atomic_load_n(&hak_large_readers, __ATOMIC_ACQUIRE)) hak_os_yield();
}

size_t hak_large_user_offset(size_t align) {
    return align > HAK_LARGE_HEADER ? align : HAK_LARGE_HEADER;
}

size_t hak_large_span_for(size_t size, size_t align) {
    size_t off = hak_large_user_offset(align);
    if (size < HAK_ALIGNMENT) size = HAK_ALIGNMENT;   /* the block must lie inside the span */
    if (size > SIZE_MAX - off - HAK_CHUNK_SIZE) return 0;
    return hak_align_up(size + off, HAK_CHUNK_SIZE);
}

/* The end of the block's last page, so that what the program may write
 * stays below the span's dirty mark (and a realloc within that page stays
 * in place). */
size_t hak_large_reach_for(size_t off, size_t size) {
    return hak_align_up(off + size, HAK_PAGE_SIZE);
}

void hak_large_publish(struct hak_large *h, size_t span, size_t align, size_t reach) {
    h->magic = HAK_LARGE_MAGIC;
    h->span = span;
    h->user = (char *)h + hak_large_user_offset(align);
    h->usable = reach - hak_large_user_offset(align);
    h->next = NULL;
    if (h->dirty < reach) h->dirty = reach;
}

/* The whole span is mapped first, then its tail unmapped: the kernel puts
 * a mapping of whole chunks right below the last one, aligned, where one
 * of `reach` bytes went into the top of the previous span's unmapped rest,
 * unaligned, and took an over-sized mapping and two unmaps more (400 live
 * blocks of 270,000 B: 2,192 map calls, against 992 this way). */
struct hak_large *hak_large_map_span(size_t span, size_t reach, size_t align) {
    struct hak_large *h = hak_os_map_aligned(span, align);
    if (!h) return NULL;
    size_t mapped = hak_align_up(reach, hak_os_page_size());
    if (mapped > span) mapped = span;
    if (mapped < span) hak_os_unmap((char *)h + mapped, span - mapped);
    h->mapped = mapped;
    return h;
}

void hak_large_map_add(void *p, size_t bytes) {
    hak_chunk_map_set(p, bytes, HAK_CHUNK_LARGE, HAK_CHUNK_LARGE_TAIL);
}

void hak_large_map_remove(void *p, size_t bytes) {
    hak_chunk_map_clear(p, bytes);
}

/* The old range stops being ours the moment mremap moves the pages, and
 * another thread may map a SuperSlab there at once: its map entries are
 * cleared before, never after. (Only the block's owner resizes it, so
 * nobody looks them up meanwhile but classifiers, which are waited for.)
 * An offset of a chunk or more is the block's own alignment, which the
 * new place must keep. */
struct hak_large *hak_large_remap(struct hak_large *h, size_t span, size_t map, size_t reach) {
    size_t off = (size_t)((char *)h->user - (char *)h);
    size_t old = h->span, old_mapped = h->mapped;
    size_t align = off >= HAK_CHUNK_SIZE ? off : HAK_CHUNK_SIZE;
    hak_large_map_remove(h, old);
    hak_large_readers_wait();
    struct hak_large *n = hak_os_remap_aligned(h, old_mapped, map, align);
    if (!n) {
        hak_large_map_add(h, old);
        errno = ENOMEM;
        return NULL;
    }
    hak_large_map_add(n, span);
    n->span = span;
    n->mapped = map;
    n->user = (char *)n + off;
    n->usable = reach - off;
    if (n->dirty < reach) n->dirty = reach;   /* the pages past the old span are new */
    hak_large_count(live_bytes, map - old_mapped);
    hak_large_count(remaps, 1);
    return n;
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

/* The chosen box's lock: fork handlers are registered after init, once
 * the box is chosen (api/fork.c), so it does not change under a fork. */
void hak_large_fork_prepare(void) {
    if (hak_large_box->fork_prepare) hak_large_box->fork_prepare();
}
void hak_large_fork_parent(void) {
    if (hak_large_box->fork_parent) hak_large_box->fork_parent();
}
/* Threads that were reading a span header when another forked do not
 * exist in the child, and their count would make its every unmap wait
 * for good (the forking thread, running this, reads none). */
void hak_large_fork_child(void) {
    __atomic_store_n(&hak_large_readers, 0, __ATOMIC_RELAXED);
    if (hak_large_box->fork_child) hak_large_box->fork_child();
}

void hak_large_stats(struct hak_large_stats *out) {
    const size_t *src = (const size_t *)&hak_large_st;
    size_t *dst = (size_t *)out;
    for (size_t i = 0; i < sizeof *out / sizeof(size_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    out->cached_bytes = hak_large_box->cached_bytes();
}
