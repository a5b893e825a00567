/* What happens to a bad free, and the checks that tell one from a good
 * free when the hit path is unsure: is a marked block really free already
 * (double free)? Does a pointer hakmem does not own look like the C
 * library's (hand it on) or like a stack, static or garbage address (report
 * it)? Everything here runs only on slow paths. */
#define _GNU_SOURCE
#include "safety/safety.h"
#include "base/options.h"
#include "base/tls.h"
#include "base/track.h"
#include "backend/heap.h"
#include "backend/transfer.h"
#include "os/os.h"

#include <link.h>
#include <stdlib.h>

void hak_report_bad(const char *op, const void *p, const char *reason) {
    long mode = hak_opt(HAK_OPT_ON_ERROR);
    if (mode == 2) return;   /* ignore */
    hak_log("hakmem: error: %s(%p): %s%s\n", op, p, reason,
            mode == 0 ? "; aborting (HAKMEM_ON_ERROR=abort)" : "; call ignored (HAKMEM_ON_ERROR=warn)");
    if (mode == 0) abort();
}

static int bin_holds(const struct hak_bin *b, const void *p) {
    unsigned n = 0;
    for (void *q = b->head; q && n <= b->max; q = hak_link_get(q), n++)
        if (q == p) return 1;
    return 0;
}

int hak_small_is_free(void *p, unsigned cls) {
    struct hak_tls *t = &hak_tls;
    /* a thread with no heap (not set up yet, or exiting) has no bins
     * either, but the block's owner is looked at all the same: a thread
     * whose first call frees a block an exited thread already freed finds
     * it in that thread's heap, which it would otherwise go on to adopt,
     * block and all, and hand out twice */
    struct hak_heap *mine = t->state == 1 ? t->heap : NULL;
    /* a batch a full bin gave up, waiting for any thread (backend/transfer.h) */
    for (unsigned c = cls; c >= HAK_CLASS_FIRST && 2 * hak_class_size[c] >= hak_class_size[cls]; c--)
        if ((c == cls || hak_class_stands_in(cls, c)) && hak_xfer_holds(p, c)) return 1;
    if (mine) {
        /* its own class's bin, or that of a smaller class it was handed
         * to while free (backend/heap_refill.c, refill_from_larger) */
        for (unsigned c = cls; c >= HAK_CLASS_FIRST && 2 * hak_class_size[c] >= hak_class_size[cls]; c--)
            if ((c == cls || hak_class_stands_in(cls, c)) && bin_holds(&t->bins[c], p)) return 1;
        if (hak_heap_holds_free(mine, p)) return 1;
    }
    /* a block of another heap (one this thread borrowed, or freed from
     * another thread) went back to that heap's inbox or runs */
    struct hak_heap *owner = hak_ss_owner(hak_ss_of(p));
    return owner && owner != mine && hak_heap_holds_free(owner, p);
}

/* ---- foreign pointers ---------------------------------------------------- */

struct segment_query { uintptr_t addr; int found; };

static int in_loaded_segment(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct segment_query *q = arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (q->addr >= start && q->addr < start + ph->p_memsz) { q->found = 1; return 1; }
    }
    return 0;
}

/* Copies n bytes from addr, or fails if any of them is unreadable. */
static int read_safely(uintptr_t addr, void *out, size_t n) {
    return hak_os_read_checked((const void *)addr, out, n);
}

int hak_foreign_plausible(const void *p) {
    uintptr_t a = (uintptr_t)p;
    if ((a & 15) || a < HAK_PAGE_SIZE || (a >> HAK_ADDR_BITS)) return 0;
    /* the calling thread's stack */
    char here;
    uintptr_t sp = (uintptr_t)&here;
    if (a + ((uintptr_t)1 << 20) > sp && a < sp + ((uintptr_t)8 << 20)) return 0;
    /* code and static data of the program and its libraries */
    struct segment_query q = { a, 0 };
    dl_iterate_phdr(in_loaded_segment, &q);
    if (q.found) return 0;
#if HAVE_VALGRIND
    if (RUNNING_ON_VALGRIND) return 1;   /* memcheck's blocks have no glibc header */
#endif
    /* a glibc block has its chunk size in the word before it: readable, a
     * multiple of 16, at least 32 */
    size_t word;
    if (!read_safely(a - sizeof word, &word, sizeof word)) return 0;
    size_t chunk = word & ~(size_t)7;
    return chunk >= 32 && (chunk & 15) == 0 && chunk < ((size_t)1 << HAK_ADDR_BITS);
}
