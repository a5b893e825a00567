/* The rest of glibc's <malloc.h>, answered for hakmem's memory:
 * malloc_trim, mallinfo2, mallinfo, malloc_stats and malloc_info. Left to
 * glibc, a preloaded hakmem would let these see only glibc's own arenas,
 * which hakmem leaves unused: a trim would give nothing back (Ruby trims
 * after each major collection) and mallinfo would report nothing in use.
 * None of this is on a hit path; each call takes the locks the stats take. */
#define _GNU_SOURCE
#include "hakmem.h"
#include "api/init.h"
#include "api/pressure.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "backend/superslab.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>

/* pad (the room glibc leaves at the top of its heap) has no meaning here:
 * the calling thread's cached blocks, every empty run, SuperSlab and
 * cached large span, and the pages of every free slab go back. Blocks that
 * other threads keep in their caches stay (their caches are theirs). */
HAK_EXPORT int hak_malloc_trim(size_t pad) {
    (void)pad;
    hak_init();
    return hak_trim();
}

static void add_bytes_out(struct hak_heap *h, void *total) {
    *(size_t *)total += hak_heap_bytes_out(h);
}

/* In glibc's terms: arena is what hakmem has mapped for blocks other than
 * large ones in use (SuperSlabs, in heaps or cached, and the large-span
 * cache); uordblks the bytes of small and mid blocks out of their runs (in
 * use, or waiting in a thread's cache); fordblks the rest of arena;
 * hblks and hblkhd the large blocks in use and their spans; keepcost what
 * malloc_trim would unmap now (the caches). The free-chunk counts
 * (ordblks, smblks, fsmblks) and usmblks have no equivalent: 0. */
HAK_EXPORT struct mallinfo2 hak_mallinfo2(void) {
    hak_init();
    size_t out = 0;
    hak_heap_foreach(add_bytes_out, &out);
    struct hak_ss_pool_stats ss;
    hak_ss_pool_stats(&ss);
    struct hak_large_stats lg;
    hak_large_stats(&lg);
    struct mallinfo2 mi = { 0 };
    mi.keepcost = ss.cached * HAK_CHUNK_SIZE + lg.cached_bytes;
    mi.arena = ss.live * HAK_CHUNK_SIZE + mi.keepcost;
    mi.uordblks = out;
    mi.fordblks = mi.arena > out ? mi.arena - out : 0;
    mi.hblks = lg.live_spans;
    mi.hblkhd = lg.live_bytes;
    return mi;
}

static int clamp_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* The old interface: the same figures, capped at INT_MAX (glibc lets them
 * wrap). */
HAK_EXPORT struct mallinfo hak_mallinfo(void) {
    struct mallinfo2 m = hak_mallinfo2();
    struct mallinfo mi = { 0 };
    mi.arena = clamp_int(m.arena);
    mi.hblks = clamp_int(m.hblks);
    mi.hblkhd = clamp_int(m.hblkhd);
    mi.uordblks = clamp_int(m.uordblks);
    mi.fordblks = clamp_int(m.fordblks);
    mi.keepcost = clamp_int(m.keepcost);
    return mi;
}

/* hakmem's counters (the HAKMEM_STATS=1 report), on stderr like glibc's. */
HAK_EXPORT void hak_malloc_stats(void) {
    hak_init();
    hak_print_stats();
}

/* The mallinfo2 figures as XML (glibc's takes options 0 only, too). The
 * figures are taken before anything is printed: stdio may allocate. */
HAK_EXPORT int hak_malloc_info(int options, FILE *fp) {
    if (options != 0 || !fp) {
        errno = EINVAL;
        return -1;
    }
    struct mallinfo2 m = hak_mallinfo2();
    int n = fprintf(fp,
                    "<malloc version=\"hakmem-1\">\n"
                    "<total type=\"in-use\" size=\"%zu\"/>\n"
                    "<total type=\"free\" size=\"%zu\"/>\n"
                    "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
                    "<total type=\"cached\" size=\"%zu\"/>\n"
                    "<system type=\"current\" size=\"%zu\"/>\n"
                    "</malloc>\n",
                    m.uordblks, m.fordblks, m.hblks, m.hblkhd, m.keepcost, m.arena + m.hblkhd);
    return n < 0 ? -1 : 0;
}

#if HAKMEM_INTERPOSE
int malloc_trim(size_t) HAK_ALIAS("hak_malloc_trim");
struct mallinfo2 mallinfo2(void) HAK_ALIAS("hak_mallinfo2");
struct mallinfo mallinfo(void) HAK_ALIAS("hak_mallinfo");
void malloc_stats(void) HAK_ALIAS("hak_malloc_stats");
int malloc_info(int, FILE *) HAK_ALIAS("hak_malloc_info");
#endif
