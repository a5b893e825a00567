/* SuperSlab pool: 2 MiB-aligned chunks carved into 64 KiB slabs. A run of
 * one or more contiguous slabs serves one size class; a run freed empty goes
 * back to its SuperSlab and can then serve any class. Blocks of classes up
 * to 64 KiB never cross a slab boundary (each slab of the run holds
 * per_slab blocks from its start, the tail stays unused and untouched), so
 * a block start is a multiple of the block size from its slab's boundary
 * and the inline free path can check it from the pointer alone; blocks of
 * larger classes are laid end to end over the run. Every SuperSlab is
 * owned by one heap (see heap.h); empty SuperSlabs go to a global cache and
 * are only given back to the OS lazily, with madvise. */
#ifndef HAK_SUPERSLAB_H
#define HAK_SUPERSLAB_H

#include "base/common.h"
#include "base/size_class.h"
#include "backend/chunk_map.h"

struct hak_heap;

enum hak_slab_state {
    HAK_SLAB_FREE = 0,   /* not part of any run */
    HAK_SLAB_CURRENT,    /* the heap allocates from it for its class */
    HAK_SLAB_PARTIAL,    /* on the heap's partial list: has free blocks */
    HAK_SLAB_FULL,       /* every block handed out; on no list */
    HAK_SLAB_TAIL,       /* a later slab of a multi-slab run */
};

/* Metadata of a run; lives in the SuperSlab header, indexed by the run's
 * first slab. Touched only by the owning heap's thread. */
struct hak_slab {
    void *free;              /* local free list */
    struct hak_slab *next, *prev;   /* heap partial list */
    uint32_t nfree;          /* blocks on the free list */
    uint32_t used;           /* blocks handed out (to caches or users) */
    uint32_t carved;         /* blocks carved so far; the rest is untouched */
    uint32_t capacity;
    uint32_t block_size;
    uint32_t block_recip;    /* ceil(2^32 / block_size): offset -> index */
    uint8_t cls;
    uint8_t nslabs;
    uint8_t state;
    uint8_t index;           /* slab index in its SuperSlab */
    uint8_t seen_empty;      /* a partial run with no block out at its heap's last decay tick */
    uint16_t per_slab;       /* blocks in each slab; 0: laid end to end (hak_ss_per_slab) */
    /* Hollow blocks (backend/heap_hollow.c): free blocks whose pages went
     * back to the OS, off the free list, one bit each in the run's bitmap
     * (hak_slab_hollow_bits) */
    uint32_t nhollow;
    uint8_t queued;          /* in its heap's queue of runs to hollow (hak_slab_queue) */
    uint8_t kept;            /* emptied, and kept with its class by a flush (hak_run_put, heap_int.h) */
};

/* The rest of a run's hollow state, kept out of struct hak_slab so that it
 * stays 64 bytes (a shift, not a multiply, indexes it: 96 bytes cost
 * slab_put 4 instructions a block): its heap's queue of runs to hollow,
 * when the run joined it and how many free bytes it had then, and the
 * bitmap word to look from for the next hollow block. */
struct hak_slab_queue {
    struct hak_slab *next, *prev;
    uint32_t queued_ms;
    uint32_t queued_bytes;
    uint32_t hollow_word;
};

#define HAK_SS_MAGIC 0x68616b6d53536c62ull   /* "hakmSSlb" */

struct hak_superslab {
    uint64_t magic;
    struct hak_heap *owner;
    struct hak_superslab *next, *prev;   /* heap list, or global pool list */
    /* its owner's bucket of SuperSlabs with room for new runs, by their
     * longest stretch of free slabs (backend/heap_runs.c, room_find);
     * room_bucket is HAK_ROOM_NONE when it has no free slab */
    struct hak_superslab *room_next, *room_prev;
    uint8_t room_bucket;
    /* its header slab's pages past HAK_SS_HEADER_END are unmapped
     * (map_batch, under an address-space limit) */
    uint8_t header_trimmed;
    /* slabs its owner is to purge with its next batch (backend/heap_runs.c) */
    uint32_t purge_pending;
    uint32_t free_mask;      /* bit i set: slab i free */
    uint32_t dirty_mask;     /* bit i set: slab i was in a run since the pages were last purged */
    uint32_t idle_mask;      /* free and dirty at its last decay tick, in no run since */
    uint32_t idle_ms;        /* when that tick was (hak_os_clock_ms) */
    uint32_t released_ms;    /* when it went back to the pool (decay of ready SuperSlabs) */
    uint32_t purged;         /* pages given back while in the global pool */
    uint32_t index;          /* dense index: chunk map entry hak_ss_entry_of(index) */
    uint8_t slab_head[HAK_SLABS_PER_SS];   /* index of the run each slab belongs to */
    struct hak_slab slabs[HAK_SLABS_PER_SS];
    struct hak_slab_queue queue[HAK_SLABS_PER_SS];   /* by run, like slabs */
};

#define HAK_SS_ALL_FREE 0xFFFFFFFEu   /* slab 0 is the header */

/* The hollow-block bitmaps (backend/heap_hollow.c) end the header's page:
 * only runs of blocks of HAK_HOLLOW_MIN_BLOCK bytes and up are made
 * hollow, so 16 bytes a slab, a bit for each of the at most 128 blocks a
 * 64 KiB slab holds, and a run's bitmap is its slabs' stretch of it.
 * Every bit is clear again once a run has no hollow block. */
#define HAK_HOLLOW_MIN_BLOCK 512u
#define HAK_HOLLOW_SLAB_BYTES (HAK_SLAB_SIZE / HAK_HOLLOW_MIN_BLOCK / 8)
#define HAK_HOLLOW_BITMAP_OFF (HAK_PAGE_SIZE - HAK_SLABS_PER_SS * HAK_HOLLOW_SLAB_BYTES)
/* The end of what the header slab holds: one page. Under an address-space
 * limit the rest of the slab, 60 KiB a SuperSlab that no run can use, is
 * unmapped when the SuperSlab is mapped: a SuperSlab then costs the limit
 * 1,988 KiB, not 2,048. */
#define HAK_SS_HEADER_END HAK_PAGE_SIZE
/* A heap's SuperSlabs with free slabs are kept by their longest stretch
 * of free slabs, in power-of-two buckets: 1, 2-3, 4-7, 8-15, 16-31. */
#define HAK_ROOM_BUCKETS 5u
#define HAK_ROOM_NONE 0xFFu

HAK_INLINE struct hak_superslab *hak_ss_of(const void *p) {
    return (struct hak_superslab *)((uintptr_t)p & ~(uintptr_t)HAK_CHUNK_MASK);
}
/* The heap a SuperSlab belongs to. Other threads read it to send blocks
 * back while a heap that took it over from an exited thread's may be
 * writing it (backend/heap_orphans.c, ss_move): a stale read only sends a block to
 * the previous owner's inbox, which forwards it. */
static inline struct hak_heap *hak_ss_owner(const struct hak_superslab *ss) {
    return __atomic_load_n(&ss->owner, __ATOMIC_RELAXED);
}
static inline void hak_ss_set_owner(struct hak_superslab *ss, struct hak_heap *h) {
    __atomic_store_n(&ss->owner, h, __ATOMIC_RELAXED);
}
HAK_INLINE unsigned hak_slab_index(const void *p) {
    return (unsigned)(((uintptr_t)p >> HAK_SLAB_SHIFT) & (HAK_SLABS_PER_SS - 1));
}
/* Class tags: hak_ss_tags holds one a slab, the reference the slow paths
 * read (runs are tagged on every slab they cover; free slabs and slab 0
 * are HAK_CLASS_INVALID); the tag window (backend/chunk_map.h), which the
 * inline free path reads when the window is on and the SuperSlab lies in
 * it, holds one a page, and a run's tag only on the pages it has carved
 * (hak_slab_tagged_pages). */
HAK_INLINE void hak_ss_store_tag(const struct hak_superslab *ss, unsigned slab, uint16_t tag) {
    __atomic_store_n(&hak_ss_tags[hak_ss_entry_of(ss->index)][slab], tag, __ATOMIC_RELAXED);
}
HAK_INLINE void hak_ss_set_tag(const struct hak_superslab *ss, unsigned slab, unsigned cls) {
    hak_ss_store_tag(ss, slab, (uint16_t)(cls * HAK_TAG_SCALE));
}
/* The window's tags of pages [from, to) of ss (page numbers from its start). */
HAK_INLINE void hak_ss_window_store(const struct hak_superslab *ss, unsigned from, unsigned to, uint16_t tag) {
    uintptr_t i = ((uintptr_t)ss - hak_tag_window_base) >> HAK_TAG_GRANULE_SHIFT;
    if (!hak_tag_window_on || i >= HAK_TAG_WINDOW_PAGES) return;
    /* other threads free blocks meanwhile: the tag is read and written
     * atomically */
    for (unsigned k = from; k < to; k++) __atomic_store_n(&hak_window_tags[i + k], tag, __ATOMIC_RELAXED);
}
HAK_INLINE void hak_ss_clear_tags(const struct hak_superslab *ss) {
    for (unsigned i = 0; i < HAK_SLABS_PER_SS; i++) hak_ss_set_tag(ss, i, HAK_CLASS_INVALID);
    hak_ss_window_store(ss, 0, HAK_TAG_SS_PAGES, HAK_CLASS_INVALID);
}
/* The run a block of this SuperSlab belongs to. */
HAK_INLINE struct hak_slab *hak_slab_of(struct hak_superslab *ss, const void *p) {
    return &ss->slabs[ss->slab_head[hak_slab_index(p)]];
}
/* The SuperSlab holding run metadata s (it lives in the header). */
HAK_INLINE struct hak_superslab *hak_ss_of_slab(const struct hak_slab *s) {
    return hak_ss_of(s);
}
/* First block of run s: runs start on their first slab's boundary. (Not
 * stored as a pointer, so that a memory checker scanning the header does not
 * take it for a reference to that block.) */
HAK_INLINE char *hak_slab_start(const struct hak_slab *s) {
    return (char *)hak_ss_of(s) + ((size_t)s->index << HAK_SLAB_SHIFT);
}
/* Run s's queue and hollow-block state (backend/heap_hollow.c). */
HAK_INLINE struct hak_slab_queue *hak_slab_queue_of(const struct hak_slab *s) {
    return &hak_ss_of(s)->queue[s->index];
}
/* Run s's hollow-block bitmap (see HAK_HOLLOW_BITMAP_OFF). */
HAK_INLINE uint64_t *hak_slab_hollow_bits(const struct hak_slab *s) {
    return (uint64_t *)((char *)hak_ss_of(s) + HAK_HOLLOW_BITMAP_OFF +
                        (size_t)s->index * HAK_HOLLOW_SLAB_BYTES);
}
/* Index of block p of run s (p a block start of s). */
HAK_INLINE uint32_t hak_slab_block_index(const struct hak_slab *s, const void *p) {
    uintptr_t off = (uintptr_t)p - (uintptr_t)hak_slab_start(s);
    uint32_t in_slab = (uint32_t)(((uint64_t)(off & (HAK_SLAB_SIZE - 1)) * s->block_recip) >> 32);
    return s->per_slab ? (uint32_t)(off >> HAK_SLAB_SHIFT) * s->per_slab + in_slab
                       : (uint32_t)(((uint64_t)off * s->block_recip) >> 32);
}
/* 1 when block p of run s is hollow (backend/heap_hollow.c); read without
 * the heap's lock by the pointer checks. */
HAK_INLINE int hak_slab_holds_hollow(const struct hak_slab *s, const void *p) {
    uint32_t k = hak_slab_block_index(s, p);
    return (int)((__atomic_load_n(&hak_slab_hollow_bits(s)[k / 64], __ATOMIC_RELAXED) >> (k % 64)) & 1);
}
/* Block k of run s (k < capacity). */
HAK_INLINE char *hak_slab_block(const struct hak_slab *s, uint32_t k) {
    if (!s->per_slab) return hak_slab_start(s) + (size_t)k * s->block_size;
    return hak_slab_start(s) + ((size_t)(k / s->per_slab) << HAK_SLAB_SHIFT) +
           (size_t)(k % s->per_slab) * s->block_size;
}
/* Pages of run s, from its start, whose tag the window holds: those in
 * which every block that starts there is carved. carve (heap_refill.c)
 * always finishes the blocks starting in the last page it reaches, so the
 * page of the first uncarved block has no carved block start and stays
 * HAK_CLASS_INVALID, like every page after it. */
HAK_INLINE unsigned hak_slab_tagged_pages(const struct hak_slab *s) {
    if (s->carved >= s->capacity) {
        /* blocks laid end to end: not the pages past the last block's
         * start, where the next multiple of the block size may lie in a
         * run shorter than its class's longest (hak_class_run_check
         * accepts as many blocks as that one holds) */
        if (!s->per_slab)
            return (unsigned)(((size_t)(s->capacity - 1) * s->block_size) >> HAK_TAG_GRANULE_SHIFT) + 1;
        return (unsigned)s->nslabs * HAK_TAG_SLAB_PAGES;
    }
    return (unsigned)((size_t)(hak_slab_block(s, s->carved) - hak_slab_start(s)) >> HAK_TAG_GRANULE_SHIFT);
}
/* 1 for a block size laid end to end over its run whose blocks all start
 * on a page boundary (a multiple of the page up to a slab, which does not
 * divide the slab): each page holds at most one block start, at its first
 * byte. The window tags only the pages where a block starts
 * (hak_slab_window_tag), so the inline check needs only "a page start":
 * the class's check accepts every page start of a slab (the low 16 bits),
 * and any other pointer into the run either fails it or lies in a page
 * tagged HAK_CLASS_INVALID, and goes to the slow path. Laid so, 24 KiB
 * blocks take their run's memory to within a 32nd where two to a slab
 * left a quarter of it unused, and their frees stay on the hit path. */
static inline int hak_size_page_starts(uint32_t bs) {
    return bs % HAK_PAGE_SIZE == 0 && bs <= HAK_SLAB_SIZE && HAK_SLAB_SIZE % bs != 0;
}
/* The window tags of run s's pages [from, to) (from its start): the tag
 * hak_ss_tags gives the run; for a run of whole-page blocks laid end to
 * end (hak_size_page_starts), only on the pages where one of its blocks
 * starts, the others keeping HAK_CLASS_INVALID. */
HAK_INLINE void hak_slab_window_tag(const struct hak_slab *s, unsigned from, unsigned to) {
    const struct hak_superslab *ss = hak_ss_of_slab(s);
    uint16_t tag = __atomic_load_n(&hak_ss_tags[hak_ss_entry_of(ss->index)][s->index], __ATOMIC_RELAXED);
    unsigned first = (unsigned)s->index * HAK_TAG_SLAB_PAGES;
    if (s->per_slab || !hak_size_page_starts(s->block_size)) {
        hak_ss_window_store(ss, first + from, first + to, tag);
        return;
    }
    unsigned step = s->block_size / HAK_PAGE_SIZE;
    for (unsigned k = (from + step - 1) / step; k < s->capacity && k * step < to; k++)
        hak_ss_window_store(ss, first + k * step, first + k * step + 1, tag);
}
/* Tags every slab of run s for its class, hollow (HAK_TAG_HOLLOW) or not,
 * and its carved pages in the window. */
HAK_INLINE void hak_ss_tag_run(const struct hak_slab *s, int hollow) {
    const struct hak_superslab *ss = hak_ss_of_slab(s);
    uint16_t tag = (uint16_t)(s->cls * HAK_TAG_SCALE + (hollow ? HAK_TAG_HOLLOW : 0));
    /* other threads free the run's blocks meanwhile: whichever tag they
     * read, the block is handled right (a hollow tag only sends it to the
     * full check) */
    for (unsigned k = 0; k < s->nslabs; k++) hak_ss_store_tag(ss, s->index + k, tag);
    hak_slab_window_tag(s, 0, hak_slab_tagged_pages(s));
}
/* 1 when block p of run s (p a block start of s) was carved: handed out
 * once at least. */
HAK_INLINE int hak_slab_block_carved(const struct hak_slab *s, const void *p) {
    return hak_slab_block_index(s, p) < __atomic_load_n(&s->carved, __ATOMIC_RELAXED);
}
/* 1 when p is exactly the start of a block of run s. */
static inline int hak_slab_is_block_start(const struct hak_slab *s, const void *p) {
    uintptr_t start = (uintptr_t)hak_slab_start(s);
    if ((uintptr_t)p < start) return 0;
    uintptr_t off = (uintptr_t)p - start;
    if (s->per_slab) {
        if ((off >> HAK_SLAB_SHIFT) >= s->nslabs) return 0;
        off &= HAK_SLAB_SIZE - 1;
        if (off >= (uintptr_t)s->per_slab * s->block_size) return 0;
    } else if (off >= (uintptr_t)s->capacity * s->block_size) {
        return 0;
    }
    uint32_t idx = (uint32_t)(((uint64_t)off * s->block_recip) >> 32);
    return (uintptr_t)idx * s->block_size == off;
}

/* Global pool (thread-safe). */
struct hak_superslab *hak_ss_acquire(struct hak_heap *owner);
void hak_ss_release(struct hak_superslab *ss);
/* Blocks per slab for a block size up to 64 KiB (blocks stay inside their
 * slab); 0 above, where they are laid end to end over the run, and for
 * the few smaller classes that would leave more than a 32nd of a slab's
 * memory unused (the unused bytes in the last block's page are resident:
 * 4,224 B, 15 a slab, 2,176 B in their last page, 3.4% of the memory of a
 * program made of such blocks) or, one block a slab, more than a 16th of
 * its address space (33,792 B: 48%), and for the classes of whole pages
 * that do not divide a slab (12, 20, 24 and 28 KiB, and the eighths from
 * 36 KiB up; hak_size_page_starts). In slab layout, and for those
 * whole-page classes, the free hit path checks a block start from the
 * pointer alone; the other classes laid end to end take hak_free_miss's
 * run check, about 26 instructions, a table read and a mispredicted
 * branch more: laying the classes from 8 to 32 KiB that fit a slab badly
 * so (18,432 and 22,528 B, three and two a slab, 16-31% of it unused)
 * made mid_large_mt take twice the time, so they keep slab layout, and
 * the address space they leave unused. */
unsigned hak_ss_per_slab(size_t bs);
/* Slabs per run for a class: enough for 4 to 16 blocks, or, from
 * HAK_RUN_SMALL_FROM up, as few as fill whole slabs, or, for blocks laid
 * end to end, nearly; at most 16 slabs. */
#define HAK_RUN_LEVELS 3u   /* run sizes a heap steps through for a class */
#define HAK_RUN_SMALL_FROM (16u << 10)   /* blocks this size and up: smallest runs */
unsigned hak_ss_run_slabs(unsigned cls, unsigned level);
/* Block-start checks by class (base/size_class.h): from a slab's start
 * (hak_class_magic) for classes whose blocks stay inside a slab, from the
 * run's start (hak_class_run_check) for every class. Made at init, after
 * hak_size_class_init. */
HAK_DATA struct hak_class_check hak_class_run_check[HAK_NCLASS];
void hak_ss_class_checks_init(void);
/* Runs inside a SuperSlab (owner thread only). A run goes where it covers
 * the most dirty slabs (pages some earlier run already touched), so freed
 * memory is reused before untouched memory is faulted in: without that, a
 * SuperSlab passed from thread to thread ends up with every page resident.
 * hak_ss_run_fit returns the best position for a run of n slabs (0: no
 * room) and how many dirty slabs it covers; hak_ss_run_place makes it. */
unsigned hak_ss_run_fit(const struct hak_superslab *ss, unsigned n, unsigned *dirty);
struct hak_slab *hak_ss_run_place(struct hak_superslab *ss, unsigned pos, unsigned n, unsigned cls);
struct hak_slab *hak_ss_run_alloc(struct hak_superslab *ss, unsigned n, unsigned cls);
void hak_ss_run_free(struct hak_superslab *ss, struct hak_slab *s);

/* Purge on a clock (owner thread): once at least period_ms after its last
 * tick, gives back the pages of the slabs that were free and dirty then and
 * have been in no run since, with at most `budget` madvise calls, stopping
 * once *excess such slabs went back (*excess is lowered by those purged);
 * the slabs free and dirty now become the next tick's candidates. The tick
 * time is the SuperSlab's own, so it carries over from owner to owner.
 * Returns the calls made. */
unsigned hak_ss_purge_idle(struct hak_superslab *ss, uint32_t now_ms, uint32_t period_ms, unsigned budget,
                           unsigned *excess);
/* Gives back now the pages of the slabs of mask that are free and dirty,
 * with the whole stretch of free slabs each is in (one call a stretch,
 * added to *calls); returns how many dirty slabs went back. */
unsigned hak_ss_purge_free(struct hak_superslab *ss, uint32_t mask, unsigned *calls);
/* Free slabs of ss whose pages a run touched since they were last purged. */
static inline unsigned hak_ss_dirty_free(const struct hak_superslab *ss) {
    return (unsigned)__builtin_popcount(ss->free_mask & ss->dirty_mask);
}
/* Purges pool SuperSlabs kept ready for at least period_ms (at most budget
 * of them); returns how many. */
unsigned hak_ss_pool_decay(uint32_t now_ms, uint32_t period_ms, unsigned budget);

void hak_ss_pool_init(void);
/* Unmaps every empty SuperSlab the pool holds; returns how many. Used when
 * the OS refuses more memory. */
size_t hak_ss_pool_release_all(void);
void hak_ss_fork_prepare(void);
void hak_ss_fork_parent(void);
void hak_ss_fork_child(void);

struct hak_ss_pool_stats { size_t mapped, reused, cached, purged, unmapped, live, decayed; };
void hak_ss_pool_stats(struct hak_ss_pool_stats *out);

#endif
