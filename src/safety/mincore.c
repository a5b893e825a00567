/* HAKMEM_SAFETY=mincore: the seed allocator's approach, kept for A/B runs.
 * It does not trust the chunk map: ownership is decided by asking the kernel
 * whether the chunk's first page is mapped (mincore, os/os.h), then reading the
 * header magic there. A small per-thread cache of recently confirmed chunks
 * avoids most syscalls; any unmap by hakmem invalidates it. Every small free
 * comes here (SuperSlabs get the checked tag), so the cost is visible. */
#define _GNU_SOURCE
#include "safety/safety.h"
#include "backend/chunk_map.h"
#include "backend/large.h"
#include "backend/superslab.h"
#include "os/os.h"

#define CACHE_WAYS 16
#define MAX_TAIL_WALK 512
#define MAPPED_OTHER 15u   /* mapped, but no hakmem header at its start (below any SuperSlab entry) */

static __thread struct {
    uintptr_t chunk[CACHE_WAYS];
    uint16_t entry[CACHE_WAYS];
    unsigned epoch, next;
} cache __attribute__((tls_model("initial-exec")));

/* Reads a word at a mapped address that may still be unreadable (a guard
 * page): the kernel copies it for us or reports EFAULT. */
static int read_word(uintptr_t addr, uint64_t *out) {
    return hak_os_read_checked((const void *)addr, out, sizeof *out);
}

static unsigned probe_chunk(uintptr_t base) {
    if (!hak_os_page_mapped((const void *)base)) return HAK_CHUNK_NONE;
    uint64_t magic;
    if (!read_word(base, &magic)) return HAK_CHUNK_NONE;
    if (magic == HAK_SS_MAGIC)   /* the header's page is readable: so is its index */
        return hak_ss_entry_of(((struct hak_superslab *)base)->index) | HAK_SS_ENTRY_CHECKED;
    if (magic == HAK_LARGE_MAGIC) return HAK_CHUNK_LARGE;
    return MAPPED_OTHER;
}

static unsigned chunk_entry_cached(uintptr_t base) {
    unsigned epoch = __atomic_load_n(&hak_chunk_unmap_epoch, __ATOMIC_ACQUIRE);
    if (cache.epoch != epoch) {
        for (int i = 0; i < CACHE_WAYS; i++) cache.chunk[i] = 0;
        cache.epoch = epoch;
    }
    for (int i = 0; i < CACHE_WAYS; i++)
        if (cache.chunk[i] == base) return cache.entry[i];
    unsigned k = probe_chunk(base);
    if (k != HAK_CHUNK_NONE && k != MAPPED_OTHER) {     /* only positive answers are remembered */
        unsigned slot = cache.next++ % CACHE_WAYS;
        cache.chunk[slot] = base;
        cache.entry[slot] = (uint16_t)k;
    }
    return k;
}

/* p against the span whose header the probe found at chunk b; the caller
 * counts itself a reader (backend/large.h). The span's header is read
 * only if the chunk map still gives it b: a span that left the map is
 * going away and holds no block. */
static enum hak_ptr_kind classify_at_header(const void *p, uintptr_t b, struct hak_ptr_info *info) {
    if (hak_chunk_kind((const void *)b) != HAK_CHUNK_LARGE) return HAK_PTR_FOREIGN;
    return hak_classify_at_span(p, (const struct hak_large *)b, 1, info);
}

static enum hak_ptr_kind mincore_classify(const void *p, struct hak_ptr_info *info) {
    uintptr_t a = (uintptr_t)p;
    if (a >> HAK_ADDR_BITS) return HAK_PTR_FOREIGN;
    uintptr_t base = a & ~(uintptr_t)HAK_CHUNK_MASK;
    unsigned k = chunk_entry_cached(base);
    if (k == HAK_CHUNK_NONE) return HAK_PTR_FOREIGN;
    if (k == MAPPED_OTHER) {
        /* Only a block aligned to 2 MiB or more starts past its span's first
         * chunk (so is itself chunk aligned): look back for the header over
         * the span's untouched chunks. */
        if (a & HAK_CHUNK_MASK) return HAK_PTR_FOREIGN;
        for (uintptr_t i = 1; i <= MAX_TAIL_WALK && base >= HAK_CHUNK_SIZE * i; i++) {
            uintptr_t b = base - HAK_CHUNK_SIZE * i;
            unsigned back = chunk_entry_cached(b);
            if (back == MAPPED_OTHER) continue;
            if (back != HAK_CHUNK_LARGE) break;
            hak_large_read_begin();
            enum hak_ptr_kind r = classify_at_header(p, b, info);
            hak_large_read_end();
            return r == HAK_PTR_LARGE ? r : HAK_PTR_FOREIGN;
        }
        return HAK_PTR_FOREIGN;
    }
    if (k == HAK_CHUNK_LARGE) {
        hak_large_read_begin();
        enum hak_ptr_kind r = classify_at_header(p, base, info);
        hak_large_read_end();
        return r;
    }
    return hak_classify_in_chunk(p, k, 1, info);
}

const struct hak_safety_ops hak_safety_mincore = {
    .name = "mincore",
    .ss_entry_flag = HAK_SS_ENTRY_CHECKED,
    .classify = mincore_classify,
};
