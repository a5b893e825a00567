/* The SuperSlab pool's box: how the memory of SuperSlabs comes from the OS
 * and goes back to it. Chosen once at init (HAKMEM_SUPERSLAB):
 *   pages     normal pages; free slabs go back one stretch at a time
 *             (backend/ss_pages.c)
 *   hugepage  2 MiB pages, reserved (MAP_HUGETLB) or transparent; pages go
 *             back only with whole SuperSlabs (backend/ss_hugepage.c)
 * Only misses reach it: mapping a SuperSlab, purging free memory,
 * unmapping. Allocation and free hits never touch the pool. */
#ifndef HAK_SS_BOX_H
#define HAK_SS_BOX_H

#include "base/common.h"

struct hak_ss_ops {
    const char *name;
    /* At init, options read; may read system files and log (no malloc). */
    void (*init)(void);
    /* Maps size bytes (a multiple of HAK_CHUNK_SIZE), HAK_CHUNK_SIZE
     * aligned, read-write and zero; NULL on failure. */
    void *(*map)(size_t size);
    /* Gives back the pages of [p, p + size) inside a SuperSlab (free
     * slabs, pages of free blocks, a pool SuperSlab past its header page);
     * they read as zero afterwards. NULL: the box gives pages back only
     * with the whole SuperSlab, by unmapping it. */
    void (*purge)(void *p, size_t size);
    /* Unmaps [p, p + size): whole SuperSlabs. */
    void (*unmap)(void *p, size_t size);
    /* SuperSlabs mapped at most with one call (1 to 8). */
    unsigned batch;
};

/* The implementations (api/boxes.c lists them; hugepage only with
 * -Dhugepage=on). */
HAK_DATA const struct hak_ss_ops hak_ss_pages;
HAK_DATA const struct hak_ss_ops hak_ss_hugepage;
/* The box in use (init chooses it; pages until then). */
HAK_DATA const struct hak_ss_ops *hak_ss_box;

/* 1 when pages inside a SuperSlab in use can go back on their own. */
static inline int hak_ss_purges_inside(void) { return hak_ss_box->purge != NULL; }

#endif
