/* Default safety box: the chunk map says in one load whether p lies in
 * hakmem's memory; the SuperSlab header then says whether it is the start of
 * a block of a live run. No syscall, no search. */
#include "safety/safety.h"
#include "backend/chunk_map.h"
#include "backend/large.h"
#include "backend/superslab.h"

enum hak_ptr_kind hak_classify_at_span(const void *p, const struct hak_large *h, int check_block,
                                       struct hak_ptr_info *info) {
    /* past its mapped pages, the span's last chunk is anyone's (large.h) */
    if ((uintptr_t)p - (uintptr_t)h >= h->mapped) return HAK_PTR_FOREIGN;
    if (check_block && h->user != p) {
        /* a freed span in the cache keeps its header with user == NULL */
        info->reason = (!h->user && (uintptr_t)p - (uintptr_t)h < HAK_CHUNK_SIZE) ? HAK_REASON_DOUBLE
                                                                                  : HAK_REASON_INTERIOR;
        return HAK_PTR_INVALID;
    }
    info->large = (struct hak_large *)h;
    return HAK_PTR_LARGE;
}

/* p lies in a chunk the map gave to a large span; the caller counts
 * itself a reader (large.h). With no header found now, the span has left
 * the map (or is leaving it, chunk by chunk) since the caller looked: it
 * is going away, p is no block of it (only its owner frees a live block),
 * and p belongs to whatever lies in the rest of its last chunk. */
static enum hak_ptr_kind classify_large(const void *p, int check_block, struct hak_ptr_info *info) {
    struct hak_large *h = hak_large_header(p);
    return h ? hak_classify_at_span(p, h, check_block, info) : HAK_PTR_FOREIGN;
}

enum hak_ptr_kind hak_classify_in_chunk(const void *p, unsigned chunk_entry,
                                        int check_block, struct hak_ptr_info *info) {
    switch (hak_entry_kind(chunk_entry)) {
    case HAK_CHUNK_SS:
    case HAK_CHUNK_SS_CHECKED: {
        struct hak_superslab *ss = hak_ss_of(p);
        unsigned cls = hak_ss_tag(hak_ss_entry_of(ss->index), hak_slab_index(p));
        if (cls == HAK_CLASS_INVALID) {           /* a free slab, or the header */
            info->reason = hak_slab_index(p) == 0 ? HAK_REASON_FOREIGN : HAK_REASON_DOUBLE;
            return HAK_PTR_INVALID;
        }
        if (check_block && !hak_slab_is_block_start(hak_slab_of(ss, p), p)) {
            info->reason = HAK_REASON_INTERIOR;
            return HAK_PTR_INVALID;
        }
        /* the part of a run not carved yet holds no block: nothing there
         * was handed out, and taking it would hand it out twice */
        if (check_block && !hak_slab_block_carved(hak_slab_of(ss, p), p)) {
            info->reason = HAK_REASON_NOT_LIVE;
            return HAK_PTR_INVALID;
        }
        /* a free block whose page went back has no free mark to tell */
        if (check_block && hak_ss_tag_hollow(hak_ss_entry_of(ss->index), hak_slab_index(p)) &&
            hak_slab_holds_hollow(hak_slab_of(ss, p), p)) {
            info->reason = HAK_REASON_DOUBLE;
            return HAK_PTR_INVALID;
        }
        info->cls = cls;
        return HAK_PTR_SMALL;
    }
    case HAK_CHUNK_LARGE:
    case HAK_CHUNK_LARGE_TAIL: {
        hak_large_read_begin();
        enum hak_ptr_kind k = classify_large(p, check_block, info);
        hak_large_read_end();
        return k;
    }
    default:
        return HAK_PTR_FOREIGN;
    }
}

static enum hak_ptr_kind registry_classify(const void *p, struct hak_ptr_info *info) {
    return hak_classify_in_chunk(p, hak_chunk_entry(p), 1, info);
}

const struct hak_safety_ops hak_safety_registry = {
    .name = "registry",
    .ss_entry_flag = 0,
    .classify = registry_classify,
};
