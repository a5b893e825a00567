/* The `hugepage` SuperSlab box (backend/ss_box.h): each SuperSlab is one
 * 2 MiB page, so a big heap needs a TLB entry per 2 MiB instead of 512.
 * Backing, chosen at init from what the system offers:
 *   reserved huge pages (MAP_HUGETLB) while the 2 MiB reserve has pages
 *   free; a mapping the reserve cannot hold falls back to the next (a
 *   forked child writing to such a page copies 2 MiB from the reserve,
 *   and is killed with SIGBUS when the reserve is empty: the kernel's
 *   rule for private huge pages);
 *   transparent huge pages (MADV_HUGEPAGE) when THP is `always` or
 *   `madvise`: the first touch of a SuperSlab faults in its whole 2 MiB;
 *   otherwise normal pages, with one warning line.
 *
 * Purging: pages go back only with whole SuperSlabs (no purge op). A free
 * slab's 64 KiB, or a free block's page, given back inside a huge page
 * splits it: the SuperSlab then runs on 4 KiB pages for the rest of its
 * life (what this box is for is lost), and khugepaged, collapsing it again
 * later, fills the holes back in, so the memory would not even stay
 * returned. Reserved pages cannot be partly given back at all (madvise
 * refuses a range that is not whole huge pages). So the heap's clock keeps
 * its books as usual but free slabs stay resident while their SuperSlab
 * holds a run; a SuperSlab whose runs are all free goes to the pool, which
 * keeps up to HAKMEM_SS_CACHE of them whole and unmaps the rest (a reused
 * range faults in as a huge page again, where a purged one would not).
 * The cost is memory: up to the free slabs of partly used SuperSlabs,
 * which with pages would go back after a decay period. */
#include "backend/ss_box.h"
#include "base/options.h"
#include "os/os.h"

#include <string.h>

#define HUGE_2MB ((size_t)2 << 20)
_Static_assert(HAK_CHUNK_SIZE == HUGE_2MB, "a SuperSlab is one 2 MiB page");

static int use_hugetlb, use_thp;
/* Unmaps so far, and their count when MAP_HUGETLB last failed: the reserve
 * is tried again only once something went back, not on every mapping. */
static unsigned long unmaps, hugetlb_failed_at = ~0ul;

/* The number after `key` in text (a /proc/meminfo line), or -1. */
static long number_after(const char *text, const char *key) {
    const char *p = strstr(text, key);
    if (!p) return -1;
    p += strlen(key);
    while (*p == ' ' || *p == '\t') p++;
    if (*p < '0' || *p > '9') return -1;
    long v = 0;
    for (; *p >= '0' && *p <= '9' && v < (1l << 40); p++) v = v * 10 + (*p - '0');
    return v;
}

/* Free pages of the system's 2 MiB huge page reserve. */
static long hugetlb_free(void) {
    char buf[4096];
    if (hak_os_read_file("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", buf, sizeof buf) > 0)
        return number_after(buf, "");
    /* older kernels: the reserve of the default size, when that is 2 MiB */
    if (hak_os_read_file("/proc/meminfo", buf, sizeof buf) <= 0) return 0;
    if (number_after(buf, "Hugepagesize:") != 2048) return 0;
    long n = number_after(buf, "HugePages_Free:");
    return n > 0 ? n : 0;
}

/* 1 when THP serves madvised ranges: `[always]` or `[madvise]` chosen. */
static int thp_available(void) {
    char buf[256];
    if (hak_os_read_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) <= 0) return 0;
    return strstr(buf, "[always]") || strstr(buf, "[madvise]");
}

static void hugepage_init(void) {
    long reserved = hugetlb_free();
    use_hugetlb = reserved > 0;
    use_thp = thp_available();
    if (!use_hugetlb && !use_thp)
        hak_log("hakmem: warning: HAKMEM_SUPERSLAB=hugepage: the system offers no huge pages (transparent "
                "huge pages off, none reserved); SuperSlabs use normal pages\n");
    else if (hak_opt(HAK_OPT_VERBOSE))
        hak_log("hakmem: hugepage box: %s%s%s\n", use_hugetlb ? "reserved 2 MiB pages" : "",
                use_hugetlb && use_thp ? ", then " : "", use_thp ? "transparent huge pages (madvise)" : "");
}

static void *hugepage_map(size_t size) {
    if (use_hugetlb && __atomic_load_n(&hugetlb_failed_at, __ATOMIC_RELAXED) !=
                           __atomic_load_n(&unmaps, __ATOMIC_RELAXED)) {
        void *p = hak_os_map_hugetlb(size);
        if (p) return p;
        __atomic_store_n(&hugetlb_failed_at, __atomic_load_n(&unmaps, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    }
    void *p = hak_os_map_aligned(size, HAK_CHUNK_SIZE);
    if (p && use_thp) hak_os_advise_huge(p, size);   /* before any touch: the first fault takes 2 MiB */
    return p;
}

static void hugepage_unmap(void *p, size_t size) {
    hak_os_unmap(p, size);
    __atomic_add_fetch(&unmaps, 1, __ATOMIC_RELAXED);
}

const struct hak_ss_ops hak_ss_hugepage = {
    .name = "hugepage",
    .init = hugepage_init,
    .map = hugepage_map,
    .purge = NULL,
    .unmap = hugepage_unmap,
    /* the pool writes the header of each SuperSlab it maps, and that
     * touch faults in the whole huge page: a batch would make its unused
     * SuperSlabs resident before any use */
    .batch = 1,
};
