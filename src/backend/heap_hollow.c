/* Pages of free blocks inside runs still in use go back to the OS.
 *
 * A run goes back to its SuperSlab only once all its blocks are free. A
 * program that frees most of its blocks at random leaves runs with a few
 * live blocks each and their free ones resident: fragment frees 90% of
 * 170 MB of blocks, then allocates 1.5 times larger ones, which those free
 * blocks cannot serve, and peaked at 212 MiB where glibc, which coalesces,
 * peaks at 181. So a partly used run that becomes mostly free with nothing
 * taken from it joins its heap's queue. When the heap, having fallen
 * HAK_HOLLOW_DROP bytes from its peak (blocks back in its runs less those
 * taken since) with as many queued, grows again (a new run, whose pages
 * fault in), the oldest queued runs with about as many free bytes as the
 * new run holds go back, page by page where no block in use lies; a run
 * that waited in the queue HAK_HOLLOW_WAIT decay periods goes back too.
 * A new run counts only its slabs no earlier run made resident (dirty
 * ones, free runs' slabs not purged yet, add no memory): fragment's next
 * phase puts its 64-96 KiB blocks on the slabs its drop emptied, and
 * hollowing for those too took pages it reused (12,100-13,000 page faults
 * in that phase against 9,600-9,800, 2,430 purge calls against 1,810-1,940).
 * Only as much as the heap grows: the program may take the rest again,
 * from the runs' free lists, and purging it would only have it fault back
 * in (fragment's next phase reuses much of what its drop freed: the whole
 * queue at the first refill made 3,150 purge calls and 64,900 page faults,
 * pacing it by growth 2,416 and 61,200, with the same peak). Not before
 * the heap grows: a thread or a program that frees everything at its
 * end empties its runs, which then go back whole, in fewer calls
 * (mid_large_mt's threads made 100 madvise calls more at their exit, while
 * the other was still timed, and that ran 4% slower). A heap in a steady state (mid_large_mt: small
 * runs of 8-32 KiB blocks often three quarters free) or swinging
 * (realloc_grow) would otherwise give back pages it takes again: 105 and
 * 38 madvise calls (1.3 per 100,000 operations) with a 4 MiB queue alone
 * and a one-period wait.
 *
 * A free block whose first page went back loses its link and free mark:
 * it leaves the free list for the run's hollow bitmap (a bit a block, in
 * the SuperSlab's header slab), and the run's slabs get hollow tags
 * (HAK_TAG_HOLLOW), which send every free of the run's blocks off the hit
 * path to checks that look at the bitmap (a double free of a hollow block
 * would otherwise pass: its mark reads 0). Refill takes hollow blocks
 * after the free list, like carving: the link it writes faults the page
 * back in. When the last one is taken, the tags go back to normal.
 * Pages here are HAK_PAGE_SIZE: on a kernel with larger pages, a purge
 * would take live bytes beyond its range with it, so runs are never
 * hollowed there (hak_os_pages_match), nor with a SuperSlab box that gives
 * pages back only with whole SuperSlabs (backend/ss_box.h). */
#include "backend/heap_int.h"
#include "os/os.h"
#include "backend/ss_box.h"
#include "base/options.h"
#include "base/track.h"

#include <string.h>

/* Free bytes a run needs, in pages, to be worth a pass. */
#define HAK_HOLLOW_MIN_PAGES 4u
/* A fall from the peak, with as many bytes queued, that makes a heap
 * hollow its whole queue at once. */
#define HAK_HOLLOW_DROP ((size_t)4 << 20)
/* Decay periods a run waits in the queue otherwise (320 ms by default). */
#define HAK_HOLLOW_WAIT 16u
/* Runs a decay tick hollows at most (the rest wait for the next one). */
#define HAK_HOLLOW_TICK_RUNS 64u

#define RUN_PAGES_MAX (16u * (HAK_SLAB_SIZE / HAK_PAGE_SIZE))

static inline int bit_get(const uint64_t *bits, uint32_t k) {
    return (int)((__atomic_load_n(&bits[k / 64], __ATOMIC_RELAXED) >> (k % 64)) & 1);
}
/* Written under the heap's lock; read without it by the pointer checks. */
static inline void bit_put(uint64_t *bits, uint32_t k, int on) {
    uint64_t w = __atomic_load_n(&bits[k / 64], __ATOMIC_RELAXED), m = (uint64_t)1 << (k % 64);
    __atomic_store_n(&bits[k / 64], on ? w | m : w & ~m, __ATOMIC_RELAXED);
}
static inline void page_set(uint64_t *map, unsigned p) { map[p / 64] |= (uint64_t)1 << (p % 64); }
static inline int page_get(const uint64_t *map, unsigned p) { return (int)((map[p / 64] >> (p % 64)) & 1); }

/* Mostly free (3/4 of its carved blocks), with enough free bytes and
 * blocks large enough for whole pages to be free (HAK_HOLLOW_MIN_BLOCK,
 * backend/superslab.h: below it a page holds 8 blocks or more, and random
 * frees rarely leave one wholly free); in slab layout, or of whole pages
 * laid end to end (a 24 KiB block's pages are its own); not empty (an
 * empty run goes back whole, or is kept whole for an exited thread's
 * successor). */
static int worth_hollowing(const struct hak_slab *s) {
    return s->used && (s->per_slab || hak_size_page_starts(s->block_size)) &&
           s->block_size >= HAK_HOLLOW_MIN_BLOCK &&
           hak_slab_mostly_free(s) &&
           (uint64_t)s->nfree * s->block_size >= (uint64_t)HAK_HOLLOW_MIN_PAGES * HAK_PAGE_SIZE;
}

void hak_heap_hollow_dequeue(struct hak_heap *h, struct hak_slab *s) {
    if (!s->queued) return;
    struct hak_slab_queue *q = hak_slab_queue_of(s);
    if (q->prev) hak_slab_queue_of(q->prev)->next = q->next;
    else h->hollow_queue = q->next;
    if (q->next) hak_slab_queue_of(q->next)->prev = q->prev;
    else h->hollow_queue_tail = q->prev;
    q->next = q->prev = NULL;
    s->queued = 0;
    h->hollow_queued_bytes -= q->queued_bytes;
}

void hak_heap_hollow_consider_run(struct hak_heap *h, struct hak_slab *s) {
    if (s->queued || s->state != HAK_SLAB_PARTIAL || !worth_hollowing(s) || !hak_os_pages_match() ||
        !hak_ss_purges_inside())
        return;
    struct hak_slab_queue *q = hak_slab_queue_of(s);
    s->queued = 1;
    q->queued_ms = hak_os_clock_ms();
    q->queued_bytes = s->nfree * s->block_size;
    q->next = NULL;
    q->prev = h->hollow_queue_tail;
    if (q->prev) hak_slab_queue_of(q->prev)->next = s;
    else h->hollow_queue = s;
    h->hollow_queue_tail = s;
    h->hollow_queued_bytes += q->queued_bytes;
}

/* Gives back the pages of run s that hold bytes of its free list's blocks
 * and no block in use; blocks whose first page went become hollow. */
static void hollow_run(struct hak_heap *h, struct hak_slab *s) {
    uint64_t *bits = hak_slab_hollow_bits(s);
    char *base = hak_slab_start(s);
    uint32_t bs = s->block_size;
    unsigned pages = (unsigned)s->nslabs * (HAK_SLAB_SIZE / HAK_PAGE_SIZE);
    uint64_t busy[RUN_PAGES_MAX / 64] = { 0 }, fresh[RUN_PAGES_MAX / 64] = { 0 };
    if (pages > RUN_PAGES_MAX) return;
    /* the free list's blocks join the hollow ones in the bitmap for now */
    for (void *q = s->free; q; q = hak_list_get(q)) bit_put(bits, hak_slab_block_index(s, q), 1);
    for (uint32_t k = 0; k < s->carved; k++) {
        uint32_t off = (uint32_t)(hak_slab_block(s, k) - base);
        uint64_t *map = bit_get(bits, k) ? fresh : busy;
        for (unsigned p = off / HAK_PAGE_SIZE; p <= (off + bs - 1) / HAK_PAGE_SIZE; p++) page_set(map, p);
    }
    /* the pages that go: some free list block's bytes, no block in use
     * (pages of hollow blocks alone went back at an earlier pass); the
     * free list is sorted out before any of them goes */
    for (unsigned w = 0; w < RUN_PAGES_MAX / 64; w++) fresh[w] &= ~busy[w];
    void *keep = NULL, *last = NULL;
    unsigned kept = 0, moved = 0;
    for (void *q = s->free, *next; q; q = next) {
        next = hak_list_get(q);
        if (page_get(fresh, (unsigned)(((char *)q - base) / HAK_PAGE_SIZE))) {
            moved++;   /* its bit stays: hollow */
            continue;
        }
        bit_put(bits, hak_slab_block_index(s, q), 0);
        if (last) hak_list_set(last, q);
        else keep = q;
        last = q;
        kept++;
    }
    if (last) hak_list_set(last, NULL);
    /* the tags change before any mark is lost, so that from then on every
     * free of the run's blocks is checked against the bitmap */
    if (moved && !s->nhollow) hak_ss_tag_run(s, 1);
    unsigned calls = 0;
    for (unsigned p = 0; p < pages;) {
        if (!page_get(fresh, p)) { p++; continue; }
        unsigned q = p;
        while (q < pages && page_get(fresh, q)) q++;
        hak_ss_box->purge(base + (size_t)p * HAK_PAGE_SIZE, (size_t)(q - p) * HAK_PAGE_SIZE);
        calls++;
        p = q;
    }
    s->free = keep;
    s->nfree = kept;
    if (moved) {
        s->nhollow += moved;
        hak_slab_queue_of(s)->hollow_word = 0;
        if (!kept) hak_heap_partial_demote(h, s);   /* behind runs with resident free blocks */
    }
    h->st.hollowed_runs++;
    h->st.hollow_calls += calls;
    h->st.hollowed_blocks += moved;
}

static void hollow_one(struct hak_heap *h, struct hak_slab *s) {
    hak_heap_hollow_dequeue(h, s);
    if (s->state == HAK_SLAB_PARTIAL && worth_hollowing(s)) hollow_run(h, s);
}

unsigned hak_heap_hollow_all(struct hak_heap *h) {
    if (!hak_opt(HAK_OPT_DECAY_MS)) return 0;
    uint64_t before = h->st.hollowed_runs;
    while (h->hollow_queue) hollow_one(h, h->hollow_queue);
    h->dropped_bytes = 0;
    return (unsigned)(h->st.hollowed_runs - before);
}

void hak_heap_hollow_for_growth(struct hak_heap *h, size_t bytes) {
    if (h->hollow_queued_bytes < HAK_HOLLOW_DROP || h->dropped_bytes < HAK_HOLLOW_DROP ||
        !hak_opt(HAK_OPT_DECAY_MS))
        return;
    for (size_t done = 0; done < bytes && h->hollow_queue;) {
        done += hak_slab_queue_of(h->hollow_queue)->queued_bytes;
        hollow_one(h, h->hollow_queue);
    }
}

void hak_heap_hollow_tick(struct hak_heap *h, uint32_t now, uint32_t period) {
    uint32_t wait = period > INT32_MAX / HAK_HOLLOW_WAIT ? INT32_MAX : HAK_HOLLOW_WAIT * period;
    for (unsigned n = 0; n < HAK_HOLLOW_TICK_RUNS && h->hollow_queue &&
                         (int32_t)(now - hak_slab_queue_of(h->hollow_queue)->queued_ms) >= (int32_t)wait;
         n++)
        hollow_one(h, h->hollow_queue);
}

unsigned hak_slab_take_hollow(struct hak_slab *s, struct hak_bin *bin, unsigned want) {
    uint64_t *bits = hak_slab_hollow_bits(s);
    struct hak_slab_queue *q = hak_slab_queue_of(s);
    unsigned words = (s->capacity + 63) / 64, w = q->hollow_word, got = 0;
    void *head = bin->head;
    while (got < want && got < s->nhollow && w < words) {
        uint64_t word = __atomic_load_n(&bits[w], __ATOMIC_RELAXED);
        if (!word) { w++; continue; }
        __atomic_store_n(&bits[w], word & (word - 1), __ATOMIC_RELAXED);
        void *b = hak_slab_block(s, w * 64 + (unsigned)__builtin_ctzll(word));
        hak_track_noaccess(b, s->block_size);
        /* the link carries the free mark, which a block in a bin needs: a
         * second free of it would otherwise pass the hit path's check (its
         * tag is normal again once the run has no hollow block left) */
        hak_list_set(b, head);
        head = b;
        got++;
    }
    bin->head = head;
    q->hollow_word = w;
    s->nhollow -= got;
    if (!s->nhollow) {
        q->hollow_word = 0;
        hak_ss_tag_run(s, 0);
    }
    return got;
}

void hak_slab_hollow_reset(struct hak_slab *s) {
    if (!s->nhollow) return;
    uint64_t *bits = hak_slab_hollow_bits(s);
    for (unsigned w = 0; w < (s->capacity + 63) / 64; w++) __atomic_store_n(&bits[w], 0, __ATOMIC_RELAXED);
    s->nhollow = 0;
    hak_slab_queue_of(s)->hollow_word = 0;
}
