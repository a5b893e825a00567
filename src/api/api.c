/* The public API: hak_* names, and (when built with -Dinterpose=true) the
 * standard malloc names as aliases of the same code, so LD_PRELOAD or
 * linking makes hakmem the process allocator. */
#define _GNU_SOURCE
#include "hakmem.h"
#include "api/fastpath.h"
#include "api/init.h"
#include "api/fork.h"
#include "base/options.h"
#include "api/pressure.h"
#include "front/front.h"
#include "pool/pool.h"
#include "safety/safety.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "base/track.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* glibc's own entry points, for pointers hakmem does not own. */
extern void  __libc_free(void *);
extern void *__libc_realloc(void *, size_t);

/* ---- misses ------------------------------------------------------------- */

/* The box whose bins hold class cls: the front cache for tiny classes, the
 * Pool TLS box for mid ones. */
static void *box_alloc_miss(struct hak_tls *t, unsigned cls) {
    return hak_class_is_tiny(cls) ? hak_front->alloc_miss(t, cls) : hak_pool->alloc_miss(t, cls);
}

static void box_free_miss(struct hak_tls *t, void *p, unsigned cls) {
    if (hak_class_is_tiny(cls)) hak_front->free_miss(t, p, cls);
    else hak_pool->free_miss(t, p, cls);
}

/* A malloc from a thread whose heap was handed back at its exit (a key
 * destructor that runs after hakmem's, or glibc's own late cleanup): borrow
 * an abandoned heap for one block and hand it straight back, instead of
 * setting the thread up again with a heap that no destructor would return
 * once the last round of them has run. */
static void *alloc_after_teardown(unsigned cls) {
    struct hak_heap *h = hak_heap_acquire();
    if (!h) return NULL;
    void *p = hak_heap_take_one(h, cls);
    hak_heap_abandon(h);
    if (p) hak_mark_clear(p);
    return p;
}

static void *alloc_class(unsigned cls) {
    struct hak_tls *t = &hak_tls;
    if (HAK_UNLIKELY(t->state == 2)) {
        void *p = alloc_after_teardown(cls);
        if (!p) errno = ENOMEM;
        return p;
    }
    if (HAK_UNLIKELY(t->state != 1) && !hak_thread_heap()) {
        errno = ENOMEM;
        return NULL;
    }
    struct hak_bin *b = &t->bins[cls];
    void *p = b->head;
    if (p) return hak_bin_pop(b, p);
    p = box_alloc_miss(t, cls);
    /* refused by the OS (which leaves errno alone, os/os.c): once
     * more after what is cached went back */
    if (HAK_UNLIKELY(!p) && hak_release_unused()) p = box_alloc_miss(t, cls);
    if (HAK_UNLIKELY(!p)) {
        errno = ENOMEM;
        return NULL;
    }
    hak_mark_clear(p);
    return p;
}

/* A large block; when the OS refuses the mapping, once more after what
 * the process keeps cached went back (api/pressure.c). errno is left as
 * it was when the second try succeeds. A request above HAK_PRESSURE_MAX
 * is refused for its size, not for want of room that caches could make:
 * it keeps the caches (a program probing with absurd sizes made every
 * one of them be mapped again). */
#define HAK_PRESSURE_MAX ((size_t)1 << 40)
static int worth_retrying(size_t size) {
    return size <= HAK_PRESSURE_MAX && hak_release_unused();
}

static void *large_alloc(size_t size, size_t align, size_t *stale) {
    int saved = errno;
    void *p = hak_large_alloc(size, align, stale);
    if (HAK_UNLIKELY(!p) && worth_retrying(size) && (p = hak_large_alloc(size, align, stale)))
        errno = saved;
    return p;
}

static void *alloc_large(size_t size, size_t align) {
    hak_init();
    return large_alloc(size, align, NULL);
}

static HAK_NOINLINE void *hard_alloc(const struct hak_hardened_ops *hd, size_t size, size_t align);
static HAK_COLD void *hard_alloc_general(const struct hak_hardened_ops *hd, size_t size, size_t align);
static HAK_COLD void *hard_alloc_rest(size_t size);

HAK_NOINLINE void *hak_alloc_slow(size_t size) {
    hak_init();   /* the box is known from here on: no block escapes its guards */
    hak_fork_check_thread();
    const struct hak_hardened_ops *hd = hak_safety->hardened;
    /* hard_alloc's steps, with no call between (every malloc of that box
     * comes here) */
    if (HAK_UNLIKELY(hd != NULL)) return hd->malloc_fast(size, hard_alloc_rest);
    if (size <= HAK_SMALL_MAX) return alloc_class(hak_class_of(size));
    return alloc_large(size, 0);
}

/* Checks a pointer for free or realloc; returns its kind, or
 * HAK_PTR_INVALID after reporting it (the call must then do nothing). */
static enum hak_ptr_kind checked_classify(const char *op, void *p, struct hak_ptr_info *info) {
    enum hak_ptr_kind k = hak_safety->classify(p, info);
    if (k == HAK_PTR_SMALL && hak_mark_is_set(p) &&
        hak_small_is_free(p, info->cls)) {
        info->reason = HAK_REASON_DOUBLE;
        k = HAK_PTR_INVALID;
    } else if (k == HAK_PTR_FOREIGN && !hak_foreign_plausible(p)) {
        info->reason = HAK_REASON_FOREIGN;
        k = HAK_PTR_INVALID;
    }
    if (k == HAK_PTR_INVALID) hak_report_bad(op, p, info->reason);
    return k;
}

static void free_small(void *p, unsigned cls) {
    struct hak_tls *t = &hak_tls;
    if (HAK_UNLIKELY(t->state == 2)) {
        /* The thread's heap was handed back (thread exit) and glibc frees a
         * few blocks after that, from the exiting thread itself (the TLS
         * vector of a thread stack it evicts from its cache). Setting the
         * thread up again would take a heap that nothing hands back once
         * the key destructors have run: send the block to its owner. */
        hak_block_freed(p);
        hak_heap_free_remote(p);
        return;
    }
    if (HAK_UNLIKELY(t->state != 1) && !hak_thread_heap())
        return;   /* no memory even for a heap: the block is lost, never reused twice */
    struct hak_bin *b = &t->bins[cls];
    if (b->room) hak_bin_push(b, p);
    else box_free_miss(t, p, cls);
}

/* Where the inline free path sends whatever it did not push, with the tag
 * it read for p (see backend/chunk_map.h): blocks of classes whose runs
 * span several slabs (their run's start comes from the slab's position in
 * it, hak_ss_runpos, not the header), full bins, and every pointer that
 * needs checking. The multi-slab case is the Pool TLS hit path for sizes
 * above 64 KiB, so it stays short. */
HAK_NOINLINE void hak_free_miss(void *p, uintptr_t tag) {
    /* free(NULL) first: programs that free every optional field make many
     * (tree: three nodes in four), and the check below costs it a multiply
     * and two loads; a full bin pays a test and a branch a flush. */
    if (HAK_UNLIKELY(!p)) return;
    if (hak_tag_live(p, tag)) {
        /* it passed the hit path's checks: its bin was full (a consumer's
         * every eighth free). No second classification (70 instructions
         * in producer_consumer's 25,000 such frees of 200,000). */
        free_small(p, (unsigned)(tag / HAK_TAG_SCALE));
        return;
    }
    const struct hak_class_check *m =
        (const struct hak_class_check *)((const char *)hak_class_magic + tag);
    if (m->mul == 0 && tag != HAK_CLASS_INVALID && tag < HAK_TAG_HOLLOW) {
        /* a tag other than 0 means p's chunk is a plain SuperSlab; hollow
         * ones (backend/heap_hollow.c) take the full check below */
        unsigned e = hak_chunk_entry(p), slab = hak_slab_index(p);
        uint64_t off = ((uintptr_t)p & (HAK_SLAB_SIZE - 1)) +
                       ((uint64_t)hak_ss_runpos[e][slab] << HAK_SLAB_SHIFT);
        hak_fast_bin *b = hak_fast_bin_at(tag);
        const struct hak_class_check *run = &hak_class_run_check[tag / HAK_TAG_SCALE];
        if (off * run->mul < run->limit && !hak_mark_is_set(p) &&
            hak_fast_take_room(b)) {
            hak_fast_push(b, p);
            return;
        }
    }
    hak_free_slow(p);
}

/* A block the program frees once checked_classify passed it: past the
 * hardened box's guards and into its quarantine when that box is chosen. */
static void release_small(const char *op, void *p, unsigned cls) {
    const struct hak_hardened_ops *hd = hak_safety->hardened;
    if (HAK_LIKELY(hd == NULL)) {
        free_small(p, cls);
        return;
    }
    if (hd->check(op, p, hak_class_size[cls], 0) == SIZE_MAX) return;
    struct hak_tls *t = &hak_tls;
    if (t->state == 0) hak_thread_heap();
    if (t->state == 1) hd->release_small(t, p, cls);
    else free_small(p, cls);   /* exiting, or no heap to be had */
}

static void release_large(const char *op, void *p, struct hak_large *h) {
    const struct hak_hardened_ops *hd = hak_safety->hardened;
    if (HAK_UNLIKELY(hd != NULL)) {
        if (hd->check(op, p, h->usable, 1) == SIZE_MAX) return;
        hd->disarm_large(p, h->usable);
    }
    hak_track_free(p);
    hak_large_free(h);
}

static HAK_NOINLINE void free_checked(void *p);

HAK_NOINLINE void hak_free_slow(void *p) {
    if (!p) return;
    hak_fork_check_thread();
    const struct hak_hardened_ops *hd = hak_safety->hardened;
    if (HAK_UNLIKELY(hd != NULL)) {
        hd->free_fast(p, free_checked);
        return;
    }
    free_checked(p);
}

/* free's checks, in a function of its own: the hardened box's common
 * case above needs no stack frame for them. */
static HAK_NOINLINE void free_checked(void *p) {
    struct hak_ptr_info info;
    switch (checked_classify("free", p, &info)) {
    case HAK_PTR_SMALL:   release_small("free", p, info.cls); return;
    case HAK_PTR_LARGE:   release_large("free", p, info.large); return;
    case HAK_PTR_FOREIGN: __libc_free(p); return;
    case HAK_PTR_INVALID: return;
    }
}

static size_t foreign_header_size(void *p) {
    size_t word = ((const size_t *)p)[-1];
    size_t chunk = word & ~(size_t)7;
    return chunk - ((word & 2) ? 2 * sizeof(size_t) : sizeof(size_t));
}

/* The C library's own malloc_usable_size (found once, on first use, behind
 * ours), which is right whatever allocator backs __libc_malloc (memcheck
 * replaces it). If it cannot be found, read glibc's chunk header: the size
 * sits in the word before the block, low 3 bits are flags, bit 1 marks an
 * mmapped chunk (which has no next-chunk overlap). */
static size_t foreign_usable_size(void *p) {
    static size_t (*libc_usable)(void *);
    if (!libc_usable) {
        void *sym = dlsym(RTLD_NEXT, "malloc_usable_size");
        libc_usable = (sym && sym != (void *)hak_malloc_usable_size) ? (size_t (*)(void *))sym
                                                                     : foreign_header_size;
    }
    return libc_usable(p);
}

/* ---- the API ------------------------------------------------------------ */

/* Usable size of a block hakmem just handed out. */
__attribute__((unused)) static size_t block_usable(void *p) {
    struct hak_ptr_info info;
    switch (hak_classify_in_chunk(p, hak_chunk_entry(p), 0, &info)) {
    case HAK_PTR_SMALL: return hak_class_size[info.cls];
    case HAK_PTR_LARGE: return info.large->usable;
    default:            return 0;
    }
}

#if HAVE_VALGRIND
/* memcheck is told the block is as long as the program asked, and the rest
 * of its class (or span) is no-access, so its reports name the program's
 * sizes and an overflow into that slack is seen; malloc_usable_size then
 * says the request too, as glibc's does under memcheck, so the program
 * does not write there legitimately (base/track_sizes.c keeps it). */
static void track_block(void *p, size_t size, int zeroed) {
    if (!p) return;
    size_t usable = block_usable(p);
    if (size > usable) size = usable;
    VALGRIND_MALLOCLIKE_BLOCK(p, size, 0, zeroed);
    if (usable > size) VALGRIND_MAKE_MEM_NOACCESS((char *)p + size, usable - size);
    hak_track_size_set(p, size);
}
/* A realloc that keeps a small block where it is, at its new size. */
static void track_resize(void *p, size_t size) {
    size_t old = hak_track_size_get(p);
    if (old == SIZE_MAX) return;
    VALGRIND_RESIZEINPLACE_BLOCK(p, old, size, 0);
    hak_track_size_set(p, size);
}
#define hak_track_block(p, size, zeroed) track_block((p), (size), (zeroed))
#define hak_track_resize_small(p, size)  track_resize((p), (size))
#else
/* arguments are not evaluated */
#define hak_track_block(p, size, zeroed) do { } while (0)
#define hak_track_resize_small(p, size)  do { } while (0)
#endif

/* ---- the hardened box (safety/hardened.c) -------------------------------- */

/* A block from the thread's heap through the box (a few kept, one picked
 * at random). */
static HAK_COLD void *hard_take(const struct hak_hardened_ops *hd, unsigned cls) {
    struct hak_tls *t = &hak_tls;
    if (HAK_UNLIKELY(t->state == 2)) return alloc_after_teardown(cls);
    if (HAK_UNLIKELY(t->state != 1) && !hak_thread_heap()) return NULL;
    void *p = hd->take(t, cls);
    if (HAK_UNLIKELY(!p) && hak_release_unused()) p = hd->take(t, cls);
    return p;
}

/* Every allocation's path with the hardened box: a block with room for
 * its guards past the request (a small one of a class that has it, else a
 * large one with its guard page), armed. */
static HAK_COLD void *hard_alloc_general(const struct hak_hardened_ops *hd, size_t size, size_t align) {
    size_t need = hd->small_need(size);
    if (need <= HAK_SMALL_MAX && align <= HAK_SLAB_SIZE) {
        unsigned cls = align <= HAK_ALIGNMENT ? hak_class_of(need) : hak_aligned_class(need, align);
        if (cls) {
            void *p = hard_take(hd, cls);
            if (!p) {
                errno = ENOMEM;
                return NULL;
            }
            hd->arm(p, size, hak_class_size[cls], 0);
            return p;
        }
    }
    need = hd->large_need(size);
    if (need == SIZE_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = large_alloc(need, align, NULL);
    if (p) hd->arm(p, size, block_usable(p), 1);
    return p;
}

/* The general path of a malloc that malloc_fast did not settle. */
static HAK_COLD void *hard_alloc_rest(size_t size) {
    return hard_alloc_general(hak_safety->hardened, size, 0);
}

/* Its common case first, in a function of its own: with the general path
 * in the same function, every call paid for its stack frame. */
static HAK_NOINLINE void *hard_alloc(const struct hak_hardened_ops *hd, size_t size, size_t align) {
    if (align == 0) return hd->malloc_fast(size, hard_alloc_rest);
    return hard_alloc_general(hd, size, align);
}

/* realloc with the hardened box: guards checked, then the block kept (a
 * small one whose class still fits, re-armed at the new size) or moved. */
static HAK_COLD void *hard_realloc(const struct hak_hardened_ops *hd, void *p, enum hak_ptr_kind k,
                          const struct hak_ptr_info *info, size_t size) {
    int large = k == HAK_PTR_LARGE;
    size_t usable = large ? info->large->usable : hak_class_size[info->cls];
    size_t old = hd->check("realloc", p, usable, large);
    if (old == SIZE_MAX) {
        errno = EINVAL;
        return NULL;
    }
    size_t need = hd->small_need(size);
    if (!large && need <= usable && (need >= usable / 4 || usable <= 64)) {
        hd->arm(p, size, usable, 0);
        return p;
    }
    if (large && need > HAK_SMALL_MAX) {
        /* stays large: resized by the large box (mremap), guard page moved */
        need = hd->large_need(size);
        if (need == SIZE_MAX) {
            errno = ENOMEM;
            return NULL;
        }
        struct hak_large *h = info->large;
        hd->disarm_large(p, usable);
        int saved = errno;
        void *q = hak_large_realloc(h, need);
        if (!q && worth_retrying(need) && (q = hak_large_realloc(h, need))) errno = saved;
        if (!q) {
            hd->arm(p, old, usable, 1);
            return NULL;
        }
        hd->arm(q, size, block_usable(q), 1);
        return q;
    }
    void *q = hard_alloc(hd, size, 0);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    if (large) release_large("realloc", p, info->large);
    else release_small("realloc", p, info->cls);
    return q;
}

HAK_EXPORT void *hak_malloc(size_t size) {
    void *p = hak_alloc_inline(size);
    hak_track_block(p, size, 0);
    return p;
}

HAK_EXPORT void hak_free(void *p) { hak_free_inline(p); }

HAK_EXPORT void *hak_calloc(size_t n, size_t size) {
    /* glibc's first pthread_create callocs here before its thread exists */
    hak_fork_check();
    size_t total;
    if (HAK_UNLIKELY(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    if (total > HAK_SMALL_MAX) {
        size_t stale;
        hak_init();
        if (HAK_UNLIKELY(hak_safety->hardened != NULL)) {
            void *p = hard_alloc(hak_safety->hardened, total, 0);
            if (p) memset(p, 0, total);
            return p;
        }
        void *p = large_alloc(total, 0, &stale);
        hak_track_block(p, total, 1);
        /* fresh pages, and those the cache purged, are zero already */
        if (p && stale) memset(p, 0, stale < total ? stale : total);
        return p;
    }
    void *p = hak_alloc_inline(total);
    hak_track_block(p, total, 0);
    if (HAK_LIKELY(p != NULL)) memset(p, 0, total);
    return p;
}

static void *alloc_aligned_untracked(size_t align, size_t size) {
    if (align <= HAK_ALIGNMENT) return hak_alloc_inline(size);
    hak_init();
    hak_fork_check_thread();
    if (HAK_UNLIKELY(hak_safety->hardened != NULL)) return hard_alloc(hak_safety->hardened, size, align);
    if (size <= HAK_SMALL_MAX && align <= HAK_SLAB_SIZE) {
        unsigned cls = hak_aligned_class(size, align);
        if (cls) {
            /* malloc's hit path, on the class the table chose */
            void *p = hak_fast_take(hak_fast_bin_at(cls * HAK_TAG_SCALE));
            if (HAK_LIKELY(p != NULL)) return p;
            return alloc_class(cls);
        }
    }
    return alloc_large(size, align);
}

static void *alloc_aligned(size_t align, size_t size) {
    void *p = alloc_aligned_untracked(align, size);
    hak_track_block(p, size, 0);
    return p;
}

static int is_pow2(size_t x) { return x && !(x & (x - 1)); }

HAK_EXPORT int hak_posix_memalign(void **out, size_t align, size_t size) {
    if (!is_pow2(align) || align % sizeof(void *)) return EINVAL;
    int saved = errno;
    void *p = alloc_aligned(align, size);
    errno = saved;
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

HAK_EXPORT void *hak_aligned_alloc(size_t align, size_t size) {
    if (!is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return alloc_aligned(align, size);
}

HAK_EXPORT void *hak_memalign(size_t align, size_t size) {
    if (align > ((size_t)1 << 62)) {
        errno = EINVAL;
        return NULL;
    }
    if (!is_pow2(align)) {          /* glibc rounds up to a power of two */
        size_t a = HAK_ALIGNMENT;
        while (a < align) a <<= 1;
        align = a;
    }
    return alloc_aligned(align, size);
}

HAK_EXPORT void *hak_valloc(size_t size) { return alloc_aligned(HAK_PAGE_SIZE, size); }

HAK_EXPORT void *hak_pvalloc(size_t size) {
    if (size > SIZE_MAX - HAK_PAGE_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t rounded = hak_align_up(size ? size : 1, HAK_PAGE_SIZE);
    return alloc_aligned(HAK_PAGE_SIZE, rounded);
}

/* A block that is free (or a slab that is): what glibc's
 * malloc_usable_size says of a free chunk, 0, with no report. */
static int freed_block(void *p, enum hak_ptr_kind k, const struct hak_ptr_info *info) {
    if (k == HAK_PTR_SMALL) return hak_mark_is_set(p) && hak_small_is_free(p, info->cls);
    return k == HAK_PTR_INVALID && !strcmp(info->reason, HAK_REASON_DOUBLE);
}

HAK_EXPORT size_t hak_malloc_usable_size(void *p) {
    /* A live block the tag window vouches for, as on free's hit path:
     * programs that account their heap (redis's zmalloc) ask this of
     * every block they allocate and free. Everything else, freed blocks
     * and the hardened box's included, takes the full classification. */
    uintptr_t at;
    if (HAK_LIKELY(hak_live_block(p, &at))) return hak_track_usable(p, hak_class_size[at / HAK_TAG_SCALE]);
    if (!p) return 0;
    hak_fork_check_thread();   /* a large block's header is read counted */
    struct hak_ptr_info info;
    enum hak_ptr_kind k = hak_safety->classify(p, &info);
    if (freed_block(p, k, &info)) return 0;
    if (k == HAK_PTR_FOREIGN && !hak_foreign_plausible(p)) {
        info.reason = HAK_REASON_FOREIGN;
        k = HAK_PTR_INVALID;
    }
    const struct hak_hardened_ops *hd = hak_safety->hardened;
    if (HAK_UNLIKELY(hd != NULL) && (k == HAK_PTR_SMALL || k == HAK_PTR_LARGE)) {
        /* the request: the rest is the guards' */
        int large = k == HAK_PTR_LARGE;
        size_t n = hd->check("malloc_usable_size", p, large ? info.large->usable : hak_class_size[info.cls], large);
        return n == SIZE_MAX ? 0 : n;
    }
    switch (k) {
    case HAK_PTR_SMALL:   return hak_track_usable(p, hak_class_size[info.cls]);
    case HAK_PTR_LARGE:   return hak_track_usable(p, info.large->usable);
    case HAK_PTR_FOREIGN: return foreign_usable_size(p);
    case HAK_PTR_INVALID: hak_report_bad("malloc_usable_size", p, info.reason); return 0;
    }
    return 0;
}

/* A new block of `size` bytes holding p's first `keep` bytes (p stays). */
static void *copy_to_new(void *p, size_t keep, size_t size) {
    void *q = hak_alloc_inline(size);
    if (!q) return NULL;
    hak_track_block(q, size, 0);
    keep = hak_track_usable(p, keep);
    memcpy(q, p, keep < size ? keep : size);
    return q;
}

/* Moves p's first `keep` bytes to a new block of `size` bytes. */
static void *move_block(void *p, size_t keep, size_t size) {
    void *q = copy_to_new(p, keep, size);
    if (q) hak_free_inline(p);
    return q;
}

/* The block a realloc moved a small block out of. One above 256 B goes
 * straight back to its run, not to the thread's bin: a program growing
 * buffers by realloc leaves each class behind as fast as it enters it,
 * and a bin would keep that class's blocks (and their pages) for that
 * class only, while a run with no block left frees its slabs for any
 * class, and a run's free blocks can stand in for smaller classes
 * (refill_from_larger), a bin's cannot. The copy just made costs more
 * than the bin miss this may cause later (docs/PERFORMANCE.md,
 * "realloc"). Blocks up to 256 B, which strings grown a few bytes at a
 * time move often and cheaply, keep the bin. */
static void free_moved(void *p, size_t old) {
    struct hak_tls *t = &hak_tls;
    if (old <= HAK_FINE_MAX || t->state != 1) {
        hak_free_inline(p);
        return;
    }
    hak_cache_free_to_heap(t, p);
}

static void *move_small(void *p, size_t old, size_t size) {
    void *q = copy_to_new(p, old, size);
    if (q) free_moved(p, old);
    return q;
}

/* A small block that must grow by less than half its size moves to a
 * block an eighth larger than asked (within the small range): programs that
 * grow a buffer by realloc a few bytes at a time (strings appended to,
 * realloc to the exact length) would otherwise move it, and copy it whole,
 * every class or two. A block asked to grow by half or more (a vector
 * doubling its capacity) gets what it asks: that program sizes its own
 * steps, and slack there would only be copied and kept resident
 * (docs/PERFORMANCE.md, "realloc"). */
static void *realloc_small(void *p, unsigned cls, size_t size) {
    size_t old = hak_class_size[cls];
    /* keep it in place unless it would waste three quarters */
    if (size <= old) {
        if (size >= old / 4 || old <= 64) {
            hak_track_resize_small(p, size);
            return p;
        }
        return move_small(p, old, size);
    }
    if (size > HAK_SMALL_MAX) return move_small(p, old, size);   /* large: grows by mremap later */
    size_t roomy = size >= old + old / 2 ? size : size + size / 8;
    return move_small(p, old, roomy < HAK_SMALL_MAX ? roomy : HAK_SMALL_MAX);
}

HAK_EXPORT void *hak_realloc(void *p, size_t size) {
    if (!p) return hak_malloc(size);
    hak_fork_check_thread();
    if (size == 0) {                 /* glibc: frees and returns NULL */
        hak_free_inline(p);
        return NULL;
    }
    uintptr_t at;
    if (HAK_LIKELY(hak_live_block(p, &at))) return realloc_small(p, (unsigned)(at / HAK_TAG_SCALE), size);
    struct hak_ptr_info info;
    enum hak_ptr_kind k = checked_classify("realloc", p, &info);
    if (HAK_UNLIKELY(hak_safety->hardened != NULL) && (k == HAK_PTR_SMALL || k == HAK_PTR_LARGE))
        return hard_realloc(hak_safety->hardened, p, k, &info, size);
    switch (k) {
    case HAK_PTR_SMALL:
        return realloc_small(p, info.cls, size);
    case HAK_PTR_LARGE: {
        struct hak_large *h = info.large;
        if (size > HAK_SMALL_MAX) {
            /* mremap may move it: to memcheck, the old block ends here and
             * the result (or, on failure, the old block again) begins */
            __attribute__((unused)) size_t was = hak_track_usable(p, h->usable);
            hak_track_free(p);
            int saved = errno;
            void *q = hak_large_realloc(h, size);
            /* refused by the OS: once more after what is cached went back */
            if (!q && worth_retrying(size) && (q = hak_large_realloc(h, size)))
                errno = saved;
            hak_track_block(q ? q : p, q ? size : was, 1);   /* moved bytes and new zero pages are defined */
            return q;
        }
        return move_block(p, h->usable, size);
    }
    case HAK_PTR_FOREIGN:
        return __libc_realloc(p, size);
    case HAK_PTR_INVALID:
        errno = EINVAL;
        return NULL;
    }
    return NULL;
}

HAK_EXPORT void *hak_reallocarray(void *p, size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return hak_realloc(p, total);
}

/* free_sized and free_aligned_sized: a size (or alignment) the block
 * could not have been asked with is undefined behaviour, reported like
 * any bad free (the call then has no effect). A size fits a block when it
 * is at most its usable size: a lower bound would need the size asked,
 * which no block keeps (a block stands in for requests of up to half its
 * size, realloc keeps it in place down to a quarter, and aligned requests,
 * which programs free with free_sized too, may take far larger blocks).
 * The alignment must be a power of two the block's address has. Plain
 * free's path is untouched: these checks run on the sized entry points
 * only. */
static int small_size_fits(size_t size, size_t usable) {
    return size <= usable;
}

static HAK_NOINLINE void free_sized_slow(const char *op, void *p, int aligned, size_t align, size_t size) {
    if (!p) return;
    hak_fork_check_thread();
    struct hak_ptr_info info;
    enum hak_ptr_kind k = checked_classify(op, p, &info);
    size_t usable;
    switch (k) {
    case HAK_PTR_SMALL: usable = hak_class_size[info.cls]; break;
    case HAK_PTR_LARGE: usable = info.large->usable; break;
    case HAK_PTR_FOREIGN: __libc_free(p); return;   /* the C library's block: its size is its business */
    default: return;
    }
    const struct hak_hardened_ops *hd = hak_safety->hardened;
    if (HAK_UNLIKELY(hd != NULL)) {
        /* the hardened box records the request: the size must not exceed it */
        usable = hd->check(op, p, usable, k == HAK_PTR_LARGE);
        if (usable == SIZE_MAX) return;
    }
    char reason[96];
    if (aligned && (!is_pow2(align) || ((uintptr_t)p & (align - 1)))) {
        snprintf(reason, sizeof reason, "alignment %zu does not match the block", align);
        hak_report_bad(op, p, reason);
        return;
    }
    if (size > usable) {
        snprintf(reason, sizeof reason, "size %zu does not match the block (usable %zu)", size, usable);
        hak_report_bad(op, p, reason);
        return;
    }
    if (k == HAK_PTR_SMALL) release_small(op, p, info.cls);
    else release_large(op, p, info.large);
}

/* free's hit path, once the size fits the tag's class. */
HAK_EXPORT void hak_free_sized(void *p, size_t size) {
    uintptr_t at;
    if (HAK_LIKELY(hak_live_block(p, &at)) && small_size_fits(size, hak_class_size[at / HAK_TAG_SCALE])) {
        hak_fast_bin *b = hak_fast_bin_at(at);
        if (HAK_LIKELY(hak_fast_take_room(b))) hak_fast_push(b, p);
        else hak_free_miss(p, at);   /* a full bin */
        return;
    }
    free_sized_slow("free_sized", p, 0, 0, size);
}

HAK_EXPORT void hak_free_aligned_sized(void *p, size_t align, size_t size) {
    free_sized_slow("free_aligned_sized", p, 1, align, size);
}

HAK_EXPORT int hak_owns(const void *p) {
    struct hak_ptr_info info;
    if (!p) return 0;
    hak_fork_check_thread();
    enum hak_ptr_kind k = hak_classify_in_chunk(p, hak_chunk_entry(p), 1, &info);
    return k == HAK_PTR_SMALL || k == HAK_PTR_LARGE;
}

HAK_EXPORT void hak_print_config(void) {
    hak_init();
    hak_options_print();
}

/* ---- interposition ------------------------------------------------------ */
#if HAKMEM_INTERPOSE
void  *malloc(size_t) HAK_ALIAS("hak_malloc");
void   free(void *) HAK_ALIAS("hak_free");
void  *calloc(size_t, size_t) HAK_ALIAS("hak_calloc");
void  *realloc(void *, size_t) HAK_ALIAS("hak_realloc");
void  *reallocarray(void *, size_t, size_t) HAK_ALIAS("hak_reallocarray");
int    posix_memalign(void **, size_t, size_t) HAK_ALIAS("hak_posix_memalign");
void  *aligned_alloc(size_t, size_t) HAK_ALIAS("hak_aligned_alloc");
void  *memalign(size_t, size_t) HAK_ALIAS("hak_memalign");
void  *valloc(size_t) HAK_ALIAS("hak_valloc");
void  *pvalloc(size_t) HAK_ALIAS("hak_pvalloc");
size_t malloc_usable_size(void *) HAK_ALIAS("hak_malloc_usable_size");
void   free_sized(void *, size_t) HAK_ALIAS("hak_free_sized");
void   free_aligned_sized(void *, size_t, size_t) HAK_ALIAS("hak_free_aligned_sized");

/* C++'s operator delete family (libstdc++'s calls free and drops the
 * size): the sized ones go through free_sized and free_aligned_sized, so
 * a delete with a wrong size is reported. operator new is not exported:
 * it must throw std::bad_alloc when memory runs out, which C cannot do;
 * libstdc++'s calls malloc, which is ours anyway. Mangled names: Pv
 * void *, m size_t, St11align_val_t std::align_val_t (a size_t),
 * RKSt9nothrow_t const std::nothrow_t &. */
void _ZdlPv(void *) HAK_ALIAS("hak_free");
void _ZdaPv(void *) HAK_ALIAS("hak_free");
void _ZdlPvm(void *, size_t) HAK_ALIAS("hak_free_sized");
void _ZdaPvm(void *, size_t) HAK_ALIAS("hak_free_sized");

void _ZdlPvRKSt9nothrow_t(void *, const void *);
void _ZdlPvSt11align_val_t(void *, size_t);
void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *, size_t, const void *);
void _ZdlPvmSt11align_val_t(void *, size_t, size_t);

HAK_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nothrow) {
    (void)nothrow;
    hak_free_inline(p);
}
void _ZdaPvRKSt9nothrow_t(void *, const void *) HAK_ALIAS("_ZdlPvRKSt9nothrow_t");

/* the alignment is checked as free_aligned_sized checks it; the size,
 * unknown, only as far as the usable size goes */
HAK_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t align) {
    free_sized_slow("free_aligned_sized", p, 1, align, 0);
}
void _ZdaPvSt11align_val_t(void *, size_t) HAK_ALIAS("_ZdlPvSt11align_val_t");
HAK_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nothrow) {
    (void)nothrow;
    free_sized_slow("free_aligned_sized", p, 1, align, 0);
}
void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *, size_t, const void *) HAK_ALIAS("_ZdlPvSt11align_val_tRKSt9nothrow_t");

HAK_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t align) {
    free_sized_slow("free_aligned_sized", p, 1, align, size);
}
void _ZdaPvmSt11align_val_t(void *, size_t, size_t) HAK_ALIAS("_ZdlPvmSt11align_val_t");
#endif
