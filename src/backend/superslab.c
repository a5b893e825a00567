#include "backend/superslab.h"
#include "backend/chunk_map.h"
#include "backend/ss_box.h"
#include "os/os.h"
#include "backend/large.h"
#include "base/options.h"

#include <string.h>

/* Empty SuperSlabs: `ready` ones still hold their pages, `purged` ones were
 * madvised and fault back in as zero pages when reused. The box
 * (backend/ss_box.h) maps, purges and unmaps; one that purges nothing
 * (hugepage) keeps only ready ones and unmaps the rest. */
static struct {
    hak_spinlock_t lock;
    struct hak_superslab *ready, *purged;
    size_t nready, npurged;
    struct hak_ss_pool_stats st;
} pool = { .lock = HAK_SPINLOCK_INIT_KIND(HAK_LOCK_SS_POOL) };

/* With pool.lock held: ss (its pages given back, or never touched) joins
 * the purged list. */
static void purged_push_locked(struct hak_superslab *ss) {
    ss->purged = 1;
    ss->next = pool.purged;
    pool.purged = ss;
    pool.npurged++;
}

/* With pool.lock held: the purged list is at its bound (eight times the
 * cache), beyond which empty SuperSlabs are unmapped. */
static int purged_full_locked(size_t keep) {
    return pool.npurged >= 8 * (keep ? keep : 1);
}

/* Only the header's first page survives a purge, so the list link and the
 * purged flag must live there. */
_Static_assert(offsetof(struct hak_superslab, slab_head) < HAK_PAGE_SIZE, "header link in first page");
_Static_assert(sizeof(struct hak_slab) == 64, "a run's metadata is indexed by a shift");
/* The hollow-block bitmaps end the header's page. */
_Static_assert(sizeof(struct hak_superslab) <= HAK_HOLLOW_BITMAP_OFF &&
               HAK_HOLLOW_BITMAP_OFF + HAK_SLABS_PER_SS * HAK_HOLLOW_SLAB_BYTES <= HAK_SS_HEADER_END,
               "hollow bitmaps in the header's page");

/* Dense SuperSlab indices (rows of hak_ss_tags); an unmapped SuperSlab's
 * index is reused. Guarded by pool.lock. */
static uint32_t next_index;
static HAK_SPARSE uint16_t free_index[HAK_MAX_SS];
static uint32_t nfree_index;

static int index_take(uint32_t *out) {
    if (nfree_index) { *out = free_index[--nfree_index]; return 1; }
    if (next_index >= HAK_MAX_SS) return 0;
    *out = next_index++;
    return 1;
}

const struct hak_ss_ops *hak_ss_box = &hak_ss_pages;

void hak_ss_pool_init(void) { hak_ss_box->init(); }

static void ss_format(struct hak_superslab *ss, struct hak_heap *owner) {
    ss->magic = HAK_SS_MAGIC;
    hak_ss_set_owner(ss, owner);
    ss->next = ss->prev = NULL;
    ss->free_mask = HAK_SS_ALL_FREE;
    if (ss->purged) ss->dirty_mask = ss->idle_mask = 0;   /* fresh or madvised pages (the header's first page stays) */
    ss->purged = 0;
    ss->idle_ms = hak_os_clock_ms();   /* a stamp of 0 may read as the future (see hak_heap_acquire) */
    hak_ss_clear_tags(ss);
    memset(ss->slab_head, 0, sizeof ss->slab_head);
    memset(ss->slabs, 0, sizeof ss->slabs);
    for (unsigned i = 0; i < HAK_SLABS_PER_SS; i++) ss->slabs[i].index = (uint8_t)i;
}

/* Where the unused part of a new SuperSlab's header slab starts, to be
 * unmapped (see HAK_SS_HEADER_END), or HAK_SLAB_SIZE: only under an
 * address-space limit, and one low enough that the holes, a mapping more
 * for each SuperSlab, stay at 16,384 or fewer, a quarter of the kernel's
 * default bound (vm.max_map_count, 65,530): without a limit the slab's
 * untouched pages cost nothing. Not with a box that gives pages back only
 * with the whole SuperSlab (hugepage: one 2 MiB page), nor when the
 * kernel's pages are so large that nothing is left past the header. */
#define HAK_TRIM_LIMIT_MAX ((size_t)16384 * HAK_CHUNK_SIZE)   /* 32 GiB */
static size_t header_trim_start(void) {
    size_t page = hak_os_page_size();
    size_t from = (HAK_SS_HEADER_END + page - 1) & ~(page - 1);
    if (from >= HAK_SLAB_SIZE || !hak_ss_purges_inside() || hak_os_address_space_limit() > HAK_TRIM_LIMIT_MAX)
        return HAK_SLAB_SIZE;
    return from;
}

/* Maps SuperSlabs several at a time (more as the process grows), so a
 * growing heap makes few mmap calls; the extra ones wait in the pool,
 * untouched. Returns one, or NULL when no memory or index is left. */
static struct hak_superslab *map_batch(void) {
    hak_spin_lock(&pool.lock);
    unsigned want = pool.st.mapped < 4 ? 1 : pool.st.mapped < 32 ? 4 : 8;
    if (want > hak_ss_box->batch) want = hak_ss_box->batch;
    uint32_t index[8];
    unsigned n = 0;
    while (n < want && index_take(&index[n])) n++;
    hak_spin_unlock(&pool.lock);
    if (!n) return NULL;   /* HAK_MAX_SS SuperSlabs in use */
    char *base = hak_ss_box->map(n * HAK_CHUNK_SIZE);
    unsigned got = base ? n : 0;
    if (!base && n > 1 && (base = hak_ss_box->map(HAK_CHUNK_SIZE)))
        got = 1;   /* near the address-space limit: one at a time */
    if (!base && hak_large_release_cache() && (base = hak_ss_box->map(HAK_CHUNK_SIZE)))
        got = 1;   /* memory the large-span cache held was in the way */
    hak_spin_lock(&pool.lock);
    while (n > got) free_index[nfree_index++] = (uint16_t)index[--n];
    if (!got) {
        hak_spin_unlock(&pool.lock);
        return NULL;
    }
    pool.st.mapped += got;
    pool.st.live++;
    hak_spin_unlock(&pool.lock);
    size_t trim_from = header_trim_start();
    for (unsigned i = 0; i < got; i++) {
        struct hak_superslab *ss = (struct hak_superslab *)(base + i * HAK_CHUNK_SIZE);
        if (trim_from < HAK_SLAB_SIZE) {
            hak_os_unmap((char *)ss + trim_from, HAK_SLAB_SIZE - trim_from);
            ss->header_trimmed = 1;
        }
        ss->index = index[i];
        hak_ss_clear_tags(ss);
        hak_chunk_map_set(ss, HAK_CHUNK_SIZE, hak_ss_entry_of(index[i]) | hak_ss_entry_flag, 0);
    }
    if (got > 1) {
        hak_spin_lock(&pool.lock);
        for (unsigned i = 1; i < got; i++) {
            purged_push_locked((struct hak_superslab *)(base + i * HAK_CHUNK_SIZE));   /* fresh pages: as cheap to hold as purged ones */
        }
        hak_spin_unlock(&pool.lock);
    }
    return (struct hak_superslab *)base;
}

struct hak_superslab *hak_ss_acquire(struct hak_heap *owner) {
    struct hak_superslab *ss = NULL;
    hak_spin_lock(&pool.lock);
    if (pool.ready) {
        ss = pool.ready;
        pool.ready = ss->next;
        pool.nready--;
    } else if (pool.purged) {
        ss = pool.purged;
        pool.purged = ss->next;
        pool.npurged--;
    }
    if (ss) { pool.st.reused++; pool.st.live++; }
    hak_spin_unlock(&pool.lock);
    if (!ss && !(ss = map_batch())) return NULL;
    ss_format(ss, owner);
    return ss;
}

/* Gives an empty SuperSlab's range back to the OS and its index back to
 * the pool. Its tags go first: the range may next hold anything (a large
 * span, a file, a stack), and a tag left in the window would let the free
 * hit path take a pointer into it for a block. */
static void ss_unmap(struct hak_superslab *ss) {
    uint32_t index = ss->index;
    hak_ss_clear_tags(ss);
    hak_chunk_map_clear(ss, HAK_CHUNK_SIZE);
    hak_ss_box->unmap(ss, HAK_CHUNK_SIZE);
    hak_spin_lock(&pool.lock);
    free_index[nfree_index++] = (uint16_t)index;
    hak_spin_unlock(&pool.lock);
}

/* Called with pool.lock held, which it releases: keeps the address range
 * of an empty SuperSlab (reuse costs no mmap) and gives its pages back;
 * past eight times the cache, or when the box purges nothing, unmaps it
 * for good. */
static void pool_purge_unlock(struct hak_superslab *ss, size_t keep) {
    int unmap = purged_full_locked(keep) || !hak_ss_purges_inside();
    if (unmap) pool.st.unmapped++; else pool.st.purged++;
    hak_spin_unlock(&pool.lock);
    if (unmap) {
        ss_unmap(ss);
        return;
    }
    /* the header's page stays; on a kernel with larger pages, ss +
     * HAK_PAGE_SIZE is no page boundary and madvise would refuse it */
    size_t head = hak_os_page_size() > HAK_PAGE_SIZE ? hak_os_page_size() : HAK_PAGE_SIZE;
    if (ss->header_trimmed) {   /* around the hole */
        size_t end = (HAK_SS_HEADER_END + hak_os_page_size() - 1) & ~(hak_os_page_size() - 1);
        if (end > head) hak_ss_box->purge((char *)ss + head, end - head);
        hak_ss_box->purge((char *)ss + HAK_SLAB_SIZE, HAK_CHUNK_SIZE - HAK_SLAB_SIZE);
    } else {
        hak_ss_box->purge((char *)ss + head, HAK_CHUNK_SIZE - head);
    }
    hak_spin_lock(&pool.lock);
    purged_push_locked(ss);
    hak_spin_unlock(&pool.lock);
}

void hak_ss_release(struct hak_superslab *ss) {
    hak_ss_set_owner(ss, NULL);
    ss->released_ms = hak_os_clock_ms();
    size_t keep = (size_t)hak_opt(HAK_OPT_SS_CACHE);
    hak_spin_lock(&pool.lock);
    pool.st.live--;
    /* purged by its heap's clock already (a box that purges nothing only
     * kept the books: its pages are all there) */
    int clean = !(ss->dirty_mask & HAK_SS_ALL_FREE) && hak_ss_purges_inside();
    if (clean && !purged_full_locked(keep)) {
        purged_push_locked(ss);
        hak_spin_unlock(&pool.lock);
        return;
    }
    if (!clean && pool.nready < keep) {
        ss->next = pool.ready;
        pool.ready = ss;
        pool.nready++;
        hak_spin_unlock(&pool.lock);
        return;
    }
    pool_purge_unlock(ss, keep);
}

unsigned hak_ss_pool_decay(uint32_t now_ms, uint32_t period_ms, unsigned budget) {
    unsigned done = 0;
    size_t keep = (size_t)hak_opt(HAK_OPT_SS_CACHE);
    while (done < budget) {
        hak_spin_lock(&pool.lock);
        struct hak_superslab **link = &pool.ready;
        while (*link && (int32_t)(now_ms - (*link)->released_ms) < (int32_t)period_ms)
            link = &(*link)->next;
        struct hak_superslab *ss = *link;
        if (!ss) {
            hak_spin_unlock(&pool.lock);
            break;
        }
        *link = ss->next;
        pool.nready--;
        pool.st.decayed++;
        pool_purge_unlock(ss, keep);
        done++;
    }
    return done;
}

unsigned hak_ss_per_slab(size_t bs) {
    if (bs > HAK_SLAB_SIZE) return 0;
    size_t tail = HAK_SLAB_SIZE % bs;   /* its part in the last block's page is resident */
    if (tail % HAK_PAGE_SIZE > HAK_SLAB_SIZE / 32 || (bs > HAK_SLAB_SIZE / 2 && tail > HAK_SLAB_SIZE / 16))
        return 0;
    if (tail && bs % HAK_PAGE_SIZE == 0) return 0;   /* whole pages: laid end to end, still checked inline */
    return (unsigned)(HAK_SLAB_SIZE / bs);
}

/* Slabs of a run whose blocks are laid end to end: the fewest that leave
 * at most a 32nd of the run past its last block, or 16 (33,792 B: 17
 * blocks in 9 slabs). */
static size_t end_to_end_slabs(size_t bs) {
    size_t n = 1;
    while (n < 16 && (n << HAK_SLAB_SHIFT) % bs > (n << HAK_SLAB_SHIFT) / 32) n++;
    return n;
}

/* Fewest blocks of bs bytes (> a slab) that end on a slab boundary. */
static size_t blocks_filling_slabs(size_t bs) {
    size_t a = bs, b = HAK_SLAB_SIZE;
    while (b) { size_t t = a % b; a = b; b = t; }   /* a = gcd(bs, slab) */
    return HAK_SLAB_SIZE / a;
}

unsigned hak_ss_run_slabs(unsigned cls, unsigned level) {
    size_t bs = hak_class_size[cls];
    /* Runs of 16 blocks keep run turnover (and its metadata work) rare;
     * pages are touched only as blocks are carved. A heap's first runs of
     * a class are smaller (4, then 8 blocks): a thread that allocates a few
     * blocks of a class then reserves a slab or two, not eight or sixteen,
     * which other threads' runs would then touch elsewhere.
     * Blocks of HAK_RUN_SMALL_FROM bytes and more get the smallest run
     * there is: one slab (1 to 4 blocks), or above a slab the fewest blocks
     * that fill whole slabs (one for 128 and 256 KiB). A run goes back to
     * its SuperSlab, for any class, only once all its blocks are free, and
     * its slabs can then serve any class; a free block inside a run in use
     * serves its own class only. When a program frees 90% of its blocks at
     * random, that happens to 66% of 4-block runs but 18% of 16-block ones,
     * and vectors that double by realloc leave each class's count swinging
     * (docs/PERFORMANCE.md, "Runs"). Classes
     * laid over their run (above 64 KiB, and those hak_ss_per_slab lays
     * so) keep one size, which their
     * block-start check (hak_class_run_check) assumes. */
    size_t n;
    if (bs > HAK_SLAB_SIZE)
        n = blocks_filling_slabs(bs) * bs / HAK_SLAB_SIZE;
    else if (!hak_ss_per_slab(bs))
        n = end_to_end_slabs(bs);
    else if (bs >= HAK_RUN_SMALL_FROM)
        n = 1;
    else
        n = (((size_t)4 << level) + hak_ss_per_slab(bs) - 1) / hak_ss_per_slab(bs);   /* level < HAK_RUN_LEVELS */
    return n < 1 ? 1 : n > 16 ? 16 : (unsigned)n;
}

struct hak_class_check hak_class_run_check[HAK_NCLASS];

void hak_ss_class_checks_init(void) {
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++) {
        uint32_t d = hak_class_size[c];
        unsigned per_slab = hak_ss_per_slab(d);
        /* blocks that stay inside a slab: checked inline from the
         * pointer's low 16 bits; blocks of whole pages laid end to end
         * too, as page starts (hak_size_page_starts); the others from
         * their run's start, in hak_free_miss */
        hak_class_magic[c] = per_slab ? hak_class_check_make(d, per_slab)
                             : hak_size_page_starts(d) ? hak_class_check_make(HAK_PAGE_SIZE, HAK_TAG_SLAB_PAGES)
                                                       : (struct hak_class_check){ 0, 0 };
        unsigned run_slabs = hak_ss_run_slabs(c, HAK_RUN_LEVELS - 1);
        uint32_t run_blocks = per_slab ? per_slab * run_slabs
                                       : (uint32_t)(((size_t)run_slabs << HAK_SLAB_SHIFT) / d);
        hak_class_run_check[c] = hak_class_check_make(d, run_blocks);
    }
    hak_class_magic[HAK_CLASS_INVALID] = (struct hak_class_check){ 0, 0 };
}

static uint32_t run_bits(unsigned n) { return n == 32 ? 0xFFFFFFFFu : (1u << n) - 1; }

/* Bit i set when bits i..i+n-1 of mask are all set (none past bit 31). */
static uint32_t runs_of(uint32_t mask, unsigned n) {
    uint32_t r = mask;
    for (unsigned k = 1; k < n; k++) r &= mask >> k;
    return r;
}

/* Bit i set when any of bits i..i+n-1 of mask is. */
static uint32_t any_of(uint32_t mask, unsigned n) {
    uint32_t r = mask;
    for (unsigned k = 1; k < n; k++) r |= mask >> k;
    return r;
}

/* Works on the masks, not place by place: a heap that grows takes a new
 * run every few hundred blocks, and a scan of 31 places with a popcount
 * (a libgcc call on baseline x86-64) at each cost about 970 instructions
 * a run in a fresh SuperSlab (big_heap: 5% of all its instructions). */
unsigned hak_ss_run_fit(const struct hak_superslab *ss, unsigned n, unsigned *dirty) {
    uint32_t fits = runs_of(ss->free_mask, n) & HAK_SS_ALL_FREE;
    uint32_t all_dirty = fits & runs_of(ss->dirty_mask, n);
    uint32_t some_dirty = fits & any_of(ss->dirty_mask, n);
    *dirty = 0;
    if (all_dirty) {
        *dirty = n;
        return (unsigned)__builtin_ctz(all_dirty);
    }
    if (!some_dirty) return fits ? (unsigned)__builtin_ctz(fits) : 0;
    /* the first of the places with the most dirty slabs */
    unsigned best = 0;
    uint32_t want = run_bits(n);
    for (uint32_t m = some_dirty; m; m &= m - 1) {
        unsigned i = (unsigned)__builtin_ctz(m);
        unsigned d = (unsigned)__builtin_popcount((ss->dirty_mask >> i) & want);
        if (d > *dirty) {
            best = i;
            *dirty = d;
        }
    }
    return best;
}

struct hak_slab *hak_ss_run_alloc(struct hak_superslab *ss, unsigned n, unsigned cls) {
    unsigned dirty, pos = hak_ss_run_fit(ss, n, &dirty);
    return pos ? hak_ss_run_place(ss, pos, n, cls) : NULL;
}

struct hak_slab *hak_ss_run_place(struct hak_superslab *ss, unsigned i, unsigned n, unsigned cls) {
    uint32_t want = run_bits(n);
    ss->free_mask &= ~(want << i);
    ss->dirty_mask |= want << i;
    ss->idle_mask &= ~(want << i);
    struct hak_slab *s = &ss->slabs[i];
    uint32_t bs = hak_class_size[cls];
    s->free = NULL;
    s->next = s->prev = NULL;
    s->nfree = 0;
    s->used = 0;
    s->carved = 0;
    s->seen_empty = 0;
    s->kept = 0;
    s->per_slab = (uint16_t)hak_ss_per_slab(bs);
    s->capacity = s->per_slab ? n * s->per_slab : (uint32_t)(((size_t)n << HAK_SLAB_SHIFT) / bs);
    s->block_size = bs;
    s->block_recip = (uint32_t)((((uint64_t)1 << 32) + bs - 1) / bs);
    s->cls = (uint8_t)cls;
    s->nslabs = (uint8_t)n;
    s->state = HAK_SLAB_CURRENT;
    s->nhollow = 0;   /* its bitmap is clear: see HAK_HOLLOW_BITMAP_OFF */
    s->queued = 0;
    ss->queue[i] = (struct hak_slab_queue){ 0 };
    for (unsigned k = 0; k < n; k++) {
        ss->slab_head[i + k] = (uint8_t)i;
        if (k) ss->slabs[i + k].state = HAK_SLAB_TAIL;
    }
    /* Tag last: the inline free path may read the tag as soon as a block
     * escapes, which only happens after this function returns. The window
     * tags the run's pages as they are carved (heap_refill.c). */
    for (unsigned k = 0; k < n; k++) hak_ss_runpos[hak_ss_entry_of(ss->index)][i + k] = (uint8_t)k;
    for (unsigned k = 0; k < n; k++) hak_ss_set_tag(ss, i + k, cls);
    return s;
}

void hak_ss_run_free(struct hak_superslab *ss, struct hak_slab *s) {
    unsigned i = s->index, n = s->nslabs;
    for (unsigned k = 0; k < n; k++) {
        hak_ss_set_tag(ss, i + k, HAK_CLASS_INVALID);
        ss->slabs[i + k].state = HAK_SLAB_FREE;
    }
    /* a run placed here later starts with no page tagged (its carving
     * tags them) */
    hak_ss_window_store(ss, i * HAK_TAG_SLAB_PAGES, (i + n) * HAK_TAG_SLAB_PAGES, HAK_CLASS_INVALID);
    s->nslabs = 0;
    ss->free_mask |= run_bits(n) << i;
}

/* Gives back, in one call, the stretch of span's slabs around slab i
 * (span: slabs that may go back together, all free); returns its bits. */
static uint32_t purge_stretch(struct hak_superslab *ss, unsigned i, uint32_t span) {
    while (i > 1 && (span >> (i - 1) & 1)) i--;
    unsigned n = (unsigned)__builtin_ctz(~(span >> i));
    /* a box that purges nothing (hugepage) gives the pages back with the
     * whole SuperSlab; the books say they went, so that a SuperSlab with
     * no run in use leaves its heap for the pool as with pages */
    if (hak_ss_box->purge)
        hak_ss_box->purge((char *)ss + ((size_t)i << HAK_SLAB_SHIFT), (size_t)n << HAK_SLAB_SHIFT);
    uint32_t bits = run_bits(n) << i;
    ss->dirty_mask &= ~bits;
    ss->idle_mask &= ~bits;
    return bits;
}

unsigned hak_ss_purge_free(struct hak_superslab *ss, uint32_t mask, unsigned *calls) {
    uint32_t todo = mask & ss->free_mask & ss->dirty_mask, before = ss->dirty_mask;
    while (todo) {
        todo &= ~purge_stretch(ss, (unsigned)__builtin_ctz(todo), ss->free_mask);
        (*calls)++;
    }
    return (unsigned)__builtin_popcount(before & ~ss->dirty_mask);
}

unsigned hak_ss_purge_idle(struct hak_superslab *ss, uint32_t now_ms, uint32_t period_ms, unsigned budget,
                           unsigned *excess) {
    if ((int32_t)(now_ms - ss->idle_ms) < (int32_t)period_ms) return 0;
    uint32_t stale = ss->idle_mask & ss->free_mask & ss->dirty_mask;
    /* one call covers a whole stretch of free slabs that holds stale ones:
     * the clean slabs beside them cost the kernel nothing */
    uint32_t span = stale | (ss->free_mask & ~ss->dirty_mask);
    unsigned calls = 0;
    while (stale && calls < budget && *excess) {
        uint32_t dirty = ss->dirty_mask;
        uint32_t bits = purge_stretch(ss, (unsigned)__builtin_ctz(stale), span);
        unsigned purged = (unsigned)__builtin_popcount(dirty & bits);
        *excess -= purged < *excess ? purged : *excess;
        stale &= ~bits;
        calls++;
    }
    ss->idle_mask = ss->free_mask & ss->dirty_mask;
    ss->idle_ms = now_ms;
    return calls;
}

size_t hak_ss_pool_release_all(void) {
    hak_spin_lock(&pool.lock);
    struct hak_superslab *lists[2] = { pool.ready, pool.purged };
    pool.ready = pool.purged = NULL;
    pool.nready = pool.npurged = 0;
    hak_spin_unlock(&pool.lock);
    size_t n = 0;
    for (int l = 0; l < 2; l++) {
        for (struct hak_superslab *ss = lists[l], *next; ss; ss = next, n++) {
            next = ss->next;
            ss_unmap(ss);
            hak_spin_lock(&pool.lock);
            pool.st.unmapped++;
            hak_spin_unlock(&pool.lock);
        }
    }
    return n;
}

void hak_ss_fork_prepare(void) { hak_spin_fork_take(&pool.lock); }
void hak_ss_fork_parent(void) { hak_spin_fork_release(&pool.lock); }
void hak_ss_fork_child(void) { hak_spin_fork_release(&pool.lock); }

void hak_ss_pool_stats(struct hak_ss_pool_stats *out) {
    hak_spin_lock(&pool.lock);
    *out = pool.st;
    out->cached = pool.nready + pool.npurged;
    hak_spin_unlock(&pool.lock);
}
