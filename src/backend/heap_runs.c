/* A heap's runs and SuperSlabs: which SuperSlabs have room for a new run
 * and where it goes, and what happens to a run that empties. The caller
 * holds the heap's lock. */
#include "backend/heap_int.h"
#include "base/options.h"

int hak_heap_keep_mid_runs;

/* A class's partial list keeps its tail in its head's prev (the head is
 * the run partial[cls] points to), so that a run can move to its end in
 * O(1) (hak_heap_partial_demote). */
void hak_heap_partial_push(struct hak_heap *h, struct hak_slab *s) {
    struct hak_slab *head = h->partial[s->cls];
    s->state = HAK_SLAB_PARTIAL;
    s->next = head;
    if (head) {
        s->prev = head->prev;
        head->prev = s;
    } else {
        s->prev = s;
    }
    h->partial[s->cls] = s;
}

static void partial_cut(struct hak_heap *h, struct hak_slab *s) {
    struct hak_slab *head = h->partial[s->cls];
    if (s == head) h->partial[s->cls] = s->next;
    else s->prev->next = s->next;
    if (s->next) s->next->prev = s->prev;
    else if (s != head) head->prev = s->prev;   /* s was the tail */
    s->next = s->prev = NULL;
}

void hak_heap_partial_unlink(struct hak_heap *h, struct hak_slab *s) {
    hak_heap_hollow_dequeue(h, s);
    partial_cut(h, s);
}

void hak_heap_partial_demote(struct hak_heap *h, struct hak_slab *s) {
    if (!s->next) return;   /* the tail already */
    partial_cut(h, s);
    struct hak_slab *head = h->partial[s->cls], *tail = head->prev;
    tail->next = s;
    s->prev = tail;
    s->next = NULL;
    head->prev = s;
}

/* ---- where a new run fits ---------------------------------------------
 * A new run goes where it fits in the heap's SuperSlabs. Looking at each
 * one's free slabs made every new run touch every SuperSlab header, a
 * cache and TLB miss apiece: with 2 GiB of 64-byte blocks (1,000
 * SuperSlabs), half the program's time. So the SuperSlabs with free slabs
 * are also kept in buckets by their longest stretch of free slabs (see
 * HAK_ROOM_BUCKETS): a run looks in the bucket that may fit it and the
 * ones above, which all do, and full SuperSlabs are in none. */
static unsigned longest_free_stretch(uint32_t mask) {
    unsigned len = 0;
    for (; mask; mask &= mask >> 1) len++;
    return len;
}
static unsigned room_bucket_for(unsigned slabs) {
    return 31u - (unsigned)__builtin_clz(slabs);   /* slabs >= 1 */
}
static void room_remove(struct hak_heap *h, struct hak_superslab *ss) {
    if (ss->room_bucket == HAK_ROOM_NONE) return;
    if (ss->room_prev) ss->room_prev->room_next = ss->room_next;
    else h->room[ss->room_bucket] = ss->room_next;
    if (ss->room_next) ss->room_next->room_prev = ss->room_prev;
    ss->room_bucket = HAK_ROOM_NONE;
}
/* At the head of its bucket: the SuperSlab whose runs changed last is the
 * likeliest to have free slabs still resident (dirty), which room_find
 * prefers. */
static void room_insert(struct hak_heap *h, struct hak_superslab *ss, unsigned b) {
    ss->room_bucket = (uint8_t)b;
    ss->room_prev = NULL;
    ss->room_next = h->room[b];
    if (ss->room_next) ss->room_next->room_prev = ss;
    h->room[b] = ss;
}
static unsigned room_bucket_of(const struct hak_superslab *ss) {
    unsigned len = longest_free_stretch(ss->free_mask);
    return len ? room_bucket_for(len) : HAK_ROOM_NONE;
}
/* ss's free slabs changed by delta (a run placed or given back); it
 * changes bucket only when its longest stretch crosses a power of two. */
static void room_changed(struct hak_heap *h, struct hak_superslab *ss, int delta) {
    h->free_slabs += (unsigned)delta;
    unsigned b = room_bucket_of(ss);
    if (b == ss->room_bucket) return;
    room_remove(h, ss);
    if (b != HAK_ROOM_NONE) room_insert(h, ss, b);
}

/* Free slabs past a heap's bound (HAK_DIRTY_FREE_MAX, below) go back in
 * batches. A program that frees a large heap in the order it built it
 * empties the runs of one SuperSlab after the other, and a call for each
 * run (a slab, for small blocks) made about 7,400 madvise calls to free
 * 256 MiB of 16-256 B blocks twice (bench/big_heap 256 16 256 42). The
 * batch holds the pending slabs of up to HAK_PURGE_SS SuperSlabs, oldest
 * first, and gives back each one's with one call a stretch of free slabs.
 * Past HAK_PURGE_BATCH slabs (8 MiB resident a while longer), or when a
 * SuperSlab joins a full batch, the oldest one goes back; the owner's
 * next clock tick (on a miss) empties the batch, and so does another
 * thread's tick once the owner has had no miss for a period (heap_decay.c). The SuperSlabs of a heap freed in order empty
 * while they wait, and leave the batch for the pool, which gives each
 * back with one call: big_heap 256 made 1,314 madvise calls when the
 * whole batch went back at 32 slabs, 637 when only its oldest did, 308
 * with 128 slabs (and 283 with 248; fragment's final RSS did not move). */
#define HAK_PURGE_BATCH 128u

static unsigned pending_slabs(const struct hak_superslab *ss) {
    return (unsigned)__builtin_popcount(ss->purge_pending);
}

/* The batch's k-th SuperSlab leaves it, the others keeping their order
 * (oldest first); purge: its pending slabs go back first. */
static void batch_drop(struct hak_heap *h, unsigned k, int purge) {
    struct hak_superslab *ss = h->purge_ss[k];
    h->purge_slabs -= pending_slabs(ss);
    if (purge) {
        unsigned calls = 0;
        hak_heap_dirty_sub(h, hak_ss_purge_free(ss, ss->purge_pending, &calls));
        h->st.dirty_purges += calls;
    }
    ss->purge_pending = 0;
    h->purge_n--;
    for (unsigned i = k; i < h->purge_n; i++) h->purge_ss[i] = h->purge_ss[i + 1];
}

void hak_heap_purge_batch(struct hak_heap *h) {
    while (h->purge_n) batch_drop(h, h->purge_n - 1, 1);
}

static void purge_later(struct hak_heap *h, struct hak_superslab *ss, unsigned first, unsigned n) {
    if (!ss->purge_pending) {
        if (h->purge_n == HAK_PURGE_SS) batch_drop(h, 0, 1);
        h->purge_ss[h->purge_n++] = ss;
    }
    uint32_t bits = ((1u << n) - 1) << first;   /* n <= 16 */
    h->purge_slabs += (unsigned)__builtin_popcount(bits & ~ss->purge_pending);
    ss->purge_pending |= bits;
    while (h->purge_slabs > HAK_PURGE_BATCH) batch_drop(h, 0, 1);
}

/* Slabs a new run takes leave the batch (and so does their SuperSlab, if
 * they were all it had there): they are in use again. */
static void purge_unpend(struct hak_heap *h, struct hak_superslab *ss, unsigned first, unsigned n) {
    uint32_t bits = (((1u << n) - 1) << first) & ss->purge_pending;   /* n <= 16 */
    if (!bits) return;
    if (bits == ss->purge_pending)
        for (unsigned k = 0; k < h->purge_n; k++)
            if (h->purge_ss[k] == ss) {
                batch_drop(h, k, 0);
                return;
            }
    ss->purge_pending &= ~bits;
    h->purge_slabs -= (unsigned)__builtin_popcount(bits);
}

/* A SuperSlab leaving the heap leaves its batch (its slabs stay dirty: the
 * pool purges what it keeps). */
static void purge_forget(struct hak_heap *h, struct hak_superslab *ss) {
    if (!ss->purge_pending) return;
    for (unsigned k = 0; k < h->purge_n; k++)
        if (h->purge_ss[k] == ss) {
            batch_drop(h, k, 0);
            return;
        }
}

void hak_heap_ss_link(struct hak_heap *h, struct hak_superslab *ss) {
    ss->prev = NULL;
    ss->next = h->ss_list;
    if (ss->next) ss->next->prev = ss;
    h->ss_list = ss;
    h->ss_count++;
    h->free_slabs += (unsigned)__builtin_popcount(ss->free_mask);
    ss->purge_pending = 0;
    ss->room_bucket = HAK_ROOM_NONE;
    unsigned b = room_bucket_of(ss);
    if (b != HAK_ROOM_NONE) room_insert(h, ss, b);
}

void hak_heap_ss_unlink(struct hak_heap *h, struct hak_superslab *ss) {
    if (ss->prev) ss->prev->next = ss->next;
    else h->ss_list = ss->next;
    if (ss->next) ss->next->prev = ss->prev;
    h->ss_count--;
    h->free_slabs -= (unsigned)__builtin_popcount(ss->free_mask);
    room_remove(h, ss);
    purge_forget(h, ss);
}

/* Where a run of n slabs goes in h's SuperSlabs (NULL: nowhere; *pos and
 * *dirty as hak_ss_run_fit gives them): the place that covers the most
 * dirty slabs (see superslab.h) among the first HAK_RUN_FITS SuperSlabs
 * it fits in, shortest stretches first. In n's own bucket, where a
 * stretch may be too short, at most HAK_RUN_MISFITS are looked at. Fewer
 * candidates put runs on clean slabs while dirty ones waited further on
 * (docs/PERFORMANCE.md, "Runs"). When that cut the scan short
 * and no other bucket has room, the rest of n's bucket is looked at
 * before the heap takes a new SuperSlab (2 MiB, far dearer than a scan):
 * 16 SuperSlabs with 5 free slabs in a row hid one with 7 from a run of
 * 7 (a 112 KiB block). */
#define HAK_RUN_FITS 32u
#define HAK_RUN_MISFITS 16u
static struct hak_superslab *room_find(struct hak_heap *h, unsigned n, unsigned *pos, unsigned *dirty) {
    struct hak_superslab *best = NULL, *rest = NULL;
    unsigned fits = 0, misfits = 0;
    for (unsigned b = room_bucket_for(n); b < HAK_ROOM_BUCKETS; b++) {
        for (struct hak_superslab *ss = h->room[b]; ss; ss = ss->room_next) {
            unsigned d, p = hak_ss_run_fit(ss, n, &d);
            if (!p) {
                if (++misfits >= HAK_RUN_MISFITS) {
                    rest = ss->room_next;   /* only n's own bucket has misfits */
                    break;
                }
                continue;
            }
            if (!best || d > *dirty) {
                best = ss;
                *pos = p;
                *dirty = d;
                if (d == n) return best;
            }
            if (++fits >= HAK_RUN_FITS) return best;
        }
    }
    /* the SuperSlabs past the cut, not the 16 already found too short */
    if (!best)
        for (struct hak_superslab *ss = rest; ss; ss = ss->room_next) {
            unsigned d, p = hak_ss_run_fit(ss, n, &d);
            if (p) {
                *pos = p;
                *dirty = d;
                return ss;
            }
        }
    return best;
}

/* A run with no block out goes back to its SuperSlab; a SuperSlab with no
 * run goes back to the pool, except the heap's last one (so a heap that
 * oscillates around one SuperSlab does not churn). Free slabs stay
 * resident until the purge on a clock finds them idle (heap_decay.c), but
 * that runs on the owner's misses only: a program that frees most of its
 * memory at once, then allocates no more (or allocates other sizes for a
 * while), kept it all (fragment: 74 MiB of free slabs resident at the
 * end, final RSS 216 MiB against glibc's 179). Past HAK_DIRTY_FREE_MAX
 * such slabs in a heap, a run's slabs are purged as the run goes back:
 * fragment's final RSS 183 MiB. The bound is large because a heap whose
 * live size swings (realloc_grow) frees and reuses many slabs: a 4 MiB
 * bound made it 554 madvise calls instead of 17 (16 MiB: 280; 32 MiB:
 * 35), while new runs go to dirty slabs first. The bound counts only
 * the free slabs beyond those the heap's recent high covers (heap_decay.c):
 * a heap that drops most of a crest it will build again (big_heap frees
 * 1 GiB and allocates it again) keeps them for that crest, which reuses
 * them without a page fault (purged, they made big_heap 567,000 faults
 * where kept they make 301,000), and the clock
 * gives them back once the heap stays small. A drop the high does not
 * cover (a heap a new thread adopted, or one whose clock has not ticked
 * yet) still goes back at once. HAKMEM_DECAY_MS=0 turns this off with
 * the clock. */
#define HAK_DIRTY_FREE_MAX (512u)   /* slabs: 32 MiB */

void hak_heap_run_release(struct hak_heap *h, struct hak_superslab *ss, struct hak_slab *s, int keep_last) {
    unsigned first = s->index, n = s->nslabs;
    hak_heap_hollow_dequeue(h, s);
    hak_slab_hollow_reset(s);
    hak_ss_run_free(ss, s);
    room_changed(h, ss, (int)n);
    h->st.runs_freed++;
    hak_heap_dirty_add(h, n);
    /* an empty SuperSlab within the heap's recent high (heap_decay.c) stays
     * for its next crest, until the clock purges it */
    if (ss->free_mask == HAK_SS_ALL_FREE &&
        (!keep_last || (h->ss_count > 1 && !(hak_opt(HAK_OPT_DECAY_MS) && hak_heap_within_recent_high(h))))) {
        hak_heap_dirty_sub(h, hak_ss_dirty_free(ss));
        hak_heap_ss_unlink(h, ss);
        h->st.ss_released++;
        hak_ss_release(ss);
    } else if (h->dirty_free > HAK_DIRTY_FREE_MAX + hak_heap_room_under_high(h) && hak_opt(HAK_OPT_DECAY_MS)) {
        purge_later(h, ss, first, n);
    }
}

/* A new run for cls in one of h's SuperSlabs (room_find); NULL when none
 * has room. */
struct hak_slab *hak_heap_run_in_own(struct hak_heap *h, unsigned cls) {
    unsigned pos = 0, dirty = 0, n = hak_ss_run_slabs(cls, h->run_level[cls]);
    struct hak_superslab *ss = room_find(h, n, &pos, &dirty);
    /* Before the heap takes a new SuperSlab, a shorter run where one fits:
     * runs of 3 slabs leave the last of a SuperSlab's 31 unused, a 32nd
     * of its address space, which an address-space limit (ulimit -v)
     * counts. Blocks up to a slab's size only, which any run holds. */
    while (!ss && n > 1 && hak_class_size[cls] <= HAK_SLAB_SIZE)
        ss = room_find(h, --n, &pos, &dirty);
    if (!ss) return NULL;
    hak_heap_dirty_sub(h, dirty);
    if (h->run_level[cls] < HAK_RUN_LEVELS - 1) h->run_level[cls]++;
    h->st.runs_made++;
    purge_unpend(h, ss, pos, n);
    struct hak_slab *s = hak_ss_run_place(ss, pos, n, cls);
    room_changed(h, ss, -(int)n);
    hak_heap_hollow_for_growth(h, (size_t)(n - dirty) << HAK_SLAB_SHIFT);
    return s;
}

/* A new run for cls in a SuperSlab taken from the pool. */
struct hak_slab *hak_heap_run_in_new_ss(struct hak_heap *h, unsigned cls) {
    struct hak_superslab *ss = hak_ss_acquire(h);
    if (!ss) return NULL;
    h->st.ss_acquired++;
    hak_heap_ss_link(h, ss);
    h->st.runs_made++;
    unsigned n = hak_ss_run_slabs(cls, h->run_level[cls]);
    if (h->run_level[cls] < HAK_RUN_LEVELS - 1) h->run_level[cls]++;
    unsigned dirty = hak_ss_dirty_free(ss);
    struct hak_slab *s = hak_ss_run_alloc(ss, n, cls);
    room_changed(h, ss, -(int)n);
    hak_heap_dirty_add(h, hak_ss_dirty_free(ss));   /* a SuperSlab the pool kept may have some */
    if (s) hak_heap_hollow_for_growth(h, (size_t)(n - (dirty - hak_ss_dirty_free(ss))) << HAK_SLAB_SHIFT);
    return s;
}

/* ---- runs and SuperSlabs with no block out ------------------------------ */

/* h's partly used runs with no block out go back to their SuperSlabs,
 * or with kept_only those of them its flushes kept for their classes,
 * the heap then keeping its last SuperSlab (the caller holds h's lock;
 * any thread may: a current run stays). */
void hak_heap_release_empty_partial_runs(struct hak_heap *h, int kept_only) {
    if (kept_only && !h->empty_slabs) return;
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++)
        for (struct hak_slab *next, *p = h->partial[c]; p; p = next) {
            next = p->next;
            if (p->used || (kept_only && !p->kept)) continue;
            hak_heap_partial_unlink(h, p);
            hak_heap_run_release(h, hak_ss_of_slab(p), p, kept_only);
        }
    h->empty_slabs = 0;
}

/* Returns every SuperSlab with no run in use to the pool. */
void hak_heap_trim(struct hak_heap *h) {
    struct hak_superslab *ss = h->ss_list;
    while (ss) {
        struct hak_superslab *next = ss->next;
        if (ss->free_mask == HAK_SS_ALL_FREE) {
            hak_heap_dirty_sub(h, hak_ss_dirty_free(ss));
            hak_heap_ss_unlink(h, ss);
            h->st.ss_released++;
            hak_ss_release(ss);
        }
        ss = next;
    }
}

/* Releases the runs of h that have no block out, current ones too (the
 * caller holds h's lock): what an exited thread kept for its successor
 * once nobody took it, runs a borrower kept whole and those flushes kept
 * for their classes (hak_run_put, heap_int.h). */
void hak_heap_release_empty_runs(struct hak_heap *h) {
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++) {
        struct hak_slab *s = h->current[c];
        if (s && !s->used) {
            h->current[c] = NULL;
            hak_heap_run_release(h, hak_ss_of_slab(s), s, 0);
        }
    }
    hak_heap_release_empty_partial_runs(h, 0);
}
