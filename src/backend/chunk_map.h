/* The chunk map: one 16-bit entry per 2 MiB chunk of the 47-bit user
 * address space, in two levels: a directory in .bss (128 KiB) and leaves
 * of 8 KiB, each describing 8 GiB, made from metadata memory when hakmem
 * first maps a chunk they describe. One flat table would be 128 MiB of
 * .bss, which costs no memory but counts against an address-space limit
 * (RLIMIT_AS, ulimit -v) from the start. It routes every free that misses
 * the tag window and answers "is this pointer ours?" in two loads, without
 * a syscall.
 *
 * A SuperSlab's entry carries its dense index; the entry itself selects the
 * SuperSlab's row of slab class tags in hak_ss_tags. Keeping the tags in one
 * dense table (rather than in each 2 MiB-aligned header, which all fall in
 * the same L1 cache set) keeps the free path's second load a cache hit:
 * a SuperSlab's row is one 64-byte line.
 * The table has a row for every possible entry value, so the free path
 * indexes it with whatever entry it loaded, with no range check: rows of
 * entries that are not plain SuperSlabs (none, large, checked) are never
 * written and stay zero, HAK_CLASS_INVALID, which sends the free to the
 * slow path.
 *
 * (Tried and dropped: the table indexed [slab][entry], whose slab part is
 * the pointer's bits 16-20 with one AND, two instructions fewer on free.
 * Its 32 columns are 64 KiB apart, so one SuperSlab's tags all fall in the
 * same L1 set: callgrind's cache simulation counted 1.5 million more D1
 * misses on 2 million random_mixed operations.) */
#ifndef HAK_CHUNK_MAP_H
#define HAK_CHUNK_MAP_H

#include "base/size_class.h"

enum hak_chunk_kind {
    HAK_CHUNK_NONE = 0,       /* not hakmem's */
    HAK_CHUNK_LARGE = 1,      /* first chunk of a large span */
    HAK_CHUNK_LARGE_TAIL = 2, /* later chunk of a large span */
    HAK_CHUNK_SS = 3,         /* SuperSlab, freed on the inline fast path */
    HAK_CHUNK_SS_CHECKED = 4, /* SuperSlab whose frees all go through the safety box */
};

/* Entry encoding: small values are the kinds above (large, none); a
 * SuperSlab is HAK_SS_ENTRY_BASE + its index, plus HAK_SS_ENTRY_CHECKED
 * when the safety box wants to see every free. */
#define HAK_SS_ENTRY_BASE    16u
#define HAK_SS_ENTRY_CHECKED 0x8000u
#define HAK_MAX_SS           (HAK_SS_ENTRY_CHECKED - HAK_SS_ENTRY_BASE)   /* 64 GiB of SuperSlabs */
#define HAK_ENTRY_ROWS       0x10000u   /* every uint16_t entry value */

#define HAK_CHUNK_MAP_ENTRIES ((size_t)1 << (HAK_ADDR_BITS - HAK_CHUNK_SHIFT))
#define HAK_CHUNK_LEAF_SHIFT  12   /* entries a leaf: 4096, 8 KiB, 8 GiB of address space */
#define HAK_CHUNK_LEAF_ENTRIES ((size_t)1 << HAK_CHUNK_LEAF_SHIFT)
#define HAK_CHUNK_DIR_ENTRIES (HAK_CHUNK_MAP_ENTRIES >> HAK_CHUNK_LEAF_SHIFT)
/* enough to put class_magic at 16 MiB (see struct hak_free_tables) */
#define HAK_CHUNK_STATIC_LEAVES \
    (((16u << 20) - 2u * HAK_TAG_WINDOW_PAGES - 3 * HAK_ENTRY_ROWS * HAK_SLABS_PER_SS) / (2 * HAK_CHUNK_LEAF_ENTRIES))

/* The tag window: the class tag of every page of one 16 GiB stretch of
 * address space, indexed by (p - hak_tag_window_base) >> 12, so that the
 * free hit path finds a block's tag with one load, not two (the chunk map's
 * entry, then that entry's row of hak_ss_tags): one dependent load fewer
 * on every free (docs/PERFORMANCE.md, "The hit paths"; the layout in
 * docs/DESIGN.md, "The tag window"). The stretch is placed at init
 * (hak_tag_window_init) to end a little above where the kernel puts the
 * next mapping: mappings are handed out top-down, so the SuperSlabs of all
 * but a process with gigabytes of other mappings fall inside it. A
 * SuperSlab outside it has zero tags here (HAK_CLASS_INVALID) and its
 * frees take hak_free_miss, which classifies them through the chunk map:
 * correct, only slower. The same holds for every SuperSlab when the safety
 * box checks every free (HAK_SS_ENTRY_CHECKED) or with HAKMEM_TAG_WINDOW=0.
 * The hardened box keeps the tags but sets every row of hak_class_magic to
 * a check no pointer passes, so its frees reach it through the slow path
 * while it reads the window with a private copy of the rows.
 * hak_ss_tags (by slab) stays the reference the slow paths read.
 *
 * A page, not a slab, so that the window knows how far a run is carved: a
 * page has its run's tag only once every block starting in it was carved
 * (backend/heap_refill.c, carve, finishes the blocks of the last page it
 * reaches), and keeps HAK_CLASS_INVALID before (backend/superslab.h,
 * hak_slab_tagged_pages). A free of a block a run never handed out then
 * fails the hit path's check at no cost to it (the same shift, another
 * count), and the slow paths, which check the carved count, report it:
 * with slab tags such a free was taken, and the block later handed out
 * twice. The table is 8 MiB of lazily touched .bss (2 bytes a page;
 * 1 KiB a SuperSlab touched) for 16 GiB of span: a process that maps
 * more than that besides frees the rest through the chunk map. */
#define HAK_TAG_GRANULE_SHIFT 12   /* a page */
#define HAK_TAG_WINDOW_SHIFT 34    /* 16 GiB */
#define HAK_TAG_WINDOW_PAGES ((size_t)1 << (HAK_TAG_WINDOW_SHIFT - HAK_TAG_GRANULE_SHIFT))
#define HAK_TAG_SS_PAGES     ((unsigned)1 << (HAK_CHUNK_SHIFT - HAK_TAG_GRANULE_SHIFT))
#define HAK_TAG_SLAB_PAGES   ((unsigned)1 << (HAK_SLAB_SHIFT - HAK_TAG_GRANULE_SHIFT))

/* The tables the free hit path reads, in one object so that the path
 * needs one base address (one rip-relative lea in a shared library), not
 * several. Known by their own names below. */
struct hak_free_tables {
    /* first: the hit path indexes it with no offset. 8 MiB of .bss; only
     * the rows of live SuperSlabs (1 KiB each) are touched. */
    uint16_t window_tags[HAK_TAG_WINDOW_PAGES];
    /* Class tag of every slab of every SuperSlab, by chunk map entry and
     * slab index, stored as the class's bin offset, cls * 16 (the free path
     * uses it as is; hak_ss_tag() gives the class). 4 MiB of .bss; only
     * the rows of live SuperSlabs are touched. */
    uint16_t ss_tags[HAK_ENTRY_ROWS][HAK_SLABS_PER_SS];
    /* Position of every slab within its run (0 for a run's first slab),
     * so the free path can find a multi-slab run's start without the
     * header. Indexed like ss_tags. Here, in the room class_magic's
     * offset takes anyway, rather than 2 MiB more of .bss, which an
     * address-space limit (ulimit -v) counts. */
    uint8_t ss_runpos[HAK_ENTRY_ROWS][HAK_SLABS_PER_SS];
    /* Leaves of the chunk map, taken in turn as first needed (each covers
     * 8 GiB, so these cover 2 TiB; then metadata memory). Here because
     * class_magic must lie 16 MiB or more into the object: a nearer
     * offset, which the compiler folds into the symbol's address, made the
     * free hit path one instruction longer (an lea and an add where one
     * lea with base, index and offset does). Zero-fill-on-demand: only
     * the leaves in use are touched. */
    uint16_t chunk_leaves[HAK_CHUNK_STATIC_LEAVES][HAK_CHUNK_LEAF_ENTRIES];
    /* 16 bytes a class, like a bin, so one scaled index serves both; then
     * as many rows of zeros, whose check always fails, for the tags of
     * runs with hollow blocks (HAK_TAG_HOLLOW) */
    struct hak_class_check class_magic[2 * HAK_NBINS];   /* see size_class.h */
};
HAK_DATA struct hak_free_tables hak_free_tables;
#define hak_window_tags       (hak_free_tables.window_tags)
#define hak_ss_tags           (hak_free_tables.ss_tags)
#define hak_class_magic       (hak_free_tables.class_magic)

#define hak_ss_runpos         (hak_free_tables.ss_runpos)

/* A run with hollow blocks (backend/heap_hollow.c) has its class's tag
 * plus this: its zero magic row sends every free of its blocks off the hit
 * path, to the checks that know about hollow blocks (whose pages went
 * back, free mark included). */
#define HAK_TAG_HOLLOW (HAK_NBINS * HAK_TAG_SCALE)

/* The class of slab `slab` of the SuperSlab whose chunk map entry is e. */
HAK_INLINE unsigned hak_ss_tag(unsigned e, unsigned slab) {
    unsigned tag = __atomic_load_n(&hak_ss_tags[e][slab], __ATOMIC_RELAXED);
    return (tag >= HAK_TAG_HOLLOW ? tag - HAK_TAG_HOLLOW : tag) / HAK_TAG_SCALE;
}
/* 1 when that slab's run has hollow blocks. */
HAK_INLINE int hak_ss_tag_hollow(unsigned e, unsigned slab) {
    return __atomic_load_n(&hak_ss_tags[e][slab], __ATOMIC_RELAXED) >= HAK_TAG_HOLLOW;
}

/* Start of the tag window; set once at init, before any SuperSlab exists
 * (0 before: the window then covers low addresses, where nothing is
 * tagged). */
HAK_DATA uintptr_t hak_tag_window_base;
/* 1 when SuperSlabs' tags are mirrored into the window (set at init). */
HAK_DATA int hak_tag_window_on;
void hak_tag_window_init(int on);

/* The window's tag of the page holding p: HAK_CLASS_INVALID outside it. */
HAK_INLINE uintptr_t hak_window_tag(const void *p) {
    uintptr_t i = ((uintptr_t)p - hak_tag_window_base) >> HAK_TAG_GRANULE_SHIFT;
    if (HAK_UNLIKELY(i >= HAK_TAG_WINDOW_PAGES)) return HAK_CLASS_INVALID;
    /* relaxed atomic: a plain load on x86; the tag of a run with hollow
     * blocks changes while other threads free its blocks */
    return __atomic_load_n(&hak_window_tags[i], __ATOMIC_RELAXED);
}

/* HAK_SS_ENTRY_CHECKED or 0, chosen by the safety box at init. */
HAK_DATA uint16_t hak_ss_entry_flag;

/* The chunk map's directory: a leaf, or NULL where hakmem never mapped
 * anything (every entry there reads HAK_CHUNK_NONE). A leaf, once
 * published, stays for good. */
HAK_DATA uint16_t *hak_chunk_dir[HAK_CHUNK_DIR_ENTRIES];

HAK_INLINE unsigned hak_chunk_entry(const void *p) {
    uintptr_t i = (uintptr_t)p >> HAK_CHUNK_SHIFT;   /* one bound check covers high garbage */
    if (HAK_UNLIKELY(i >= HAK_CHUNK_MAP_ENTRIES)) return HAK_CHUNK_NONE;
    /* acquire: the leaf's zeros are seen before its address */
    uint16_t *leaf = __atomic_load_n(&hak_chunk_dir[i >> HAK_CHUNK_LEAF_SHIFT], __ATOMIC_ACQUIRE);
    if (!leaf) return HAK_CHUNK_NONE;
    return __atomic_load_n(&leaf[i & (HAK_CHUNK_LEAF_ENTRIES - 1)], __ATOMIC_RELAXED);
}

static inline unsigned hak_entry_kind(unsigned e) {
    if (e < HAK_SS_ENTRY_BASE) return e;
    return (e & HAK_SS_ENTRY_CHECKED) ? HAK_CHUNK_SS_CHECKED : HAK_CHUNK_SS;
}
/* The chunk map entry (and tag row) of the SuperSlab with dense index i. */
static inline unsigned hak_ss_entry_of(unsigned i) {
    return HAK_SS_ENTRY_BASE + i;
}
static inline unsigned hak_entry_ss_index(unsigned e) {
    return (e & ~HAK_SS_ENTRY_CHECKED) - HAK_SS_ENTRY_BASE;
}
HAK_INLINE unsigned hak_chunk_kind(const void *p) {
    return hak_entry_kind(hak_chunk_entry(p));
}

void hak_chunk_map_set(void *base, size_t size, unsigned first, unsigned rest);
void hak_chunk_map_clear(void *base, size_t size);

/* Bumped whenever hakmem unmaps chunks, so caches of "this chunk is ours"
 * (the mincore safety box keeps one) know to forget. */
HAK_DATA unsigned hak_chunk_unmap_epoch;

#endif
