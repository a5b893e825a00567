/* HAKMEM_SAFETY=hardened: the registry's pointer checks, plus guards
 * around every block and delayed reuse, for programs that face hostile
 * input. Everything here runs on miss paths: choosing this box gives the
 * bins no room (api/init.c), so the hit paths stay what they are for the
 * other boxes and every call of this one misses.
 *
 * A small block of class size C holding a request of n bytes:
 *   [0, n)          the program's
 *   [n, C - 16)     canary bytes (the first HARD_CANARY_MAX of them are
 *                   written and checked), keyed by the block's address
 *   [C - 16, C - 8) n, with a 32-bit check of n and the address
 *   [C - 8, C)      the next block's head guard: its size word, check
 *                   half turned by a constant
 * so an overflow of up to 16 bytes lands in the canary or the size word
 * and an underflow in the head guard; both are checked at free, realloc
 * and malloc_usable_size. free's common path reads n from the head guard,
 * which lies in the block's first line (read anyway, for its marks) unless
 * the block starts a line, and skips the size word's line: an overflow
 * that reaches the size word crosses the canary first. (A block that starts a page accepts a head
 * guard of zero: the free blocks before it may have gone hollow.) A large
 * block ends the same way (no head guard), followed by an inaccessible
 * guard page (the last page of its span), so an overflow that runs on
 * faults. Freed small blocks wait in a per-thread quarantine
 * (HAKMEM_QUARANTINE_KB) filled with a pattern, checked when they leave
 * it: a write after free is reported then, a read after free sees the
 * pattern, and a second free of a block in there (from any thread) finds
 * its quarantine mark. Blocks come from a few kept per class (the stash),
 * handed out last in, first out: a refill from the heap enters them in a
 * random order, and a block leaving the quarantine goes on top, so the
 * next malloc of its class takes the block whose lines the eviction's
 * check just read. The free-list links of the backend are keyed (base/link_guard.h).
 * Every key derives from one random secret taken at init. free's common
 * path knows a live block as the default's hit path does, by its page's
 * tag in the tag window and its class's block-start check. */
#include "safety/safety.h"
#include "base/bin.h"
#include "base/link_guard.h"
#include "base/options.h"
#include "base/tls.h"
#include "backend/chunk_map.h"
#include "backend/heap.h"
#include "backend/superslab.h"
#include "os/os.h"

#include <string.h>

#define HARD_CANARY_MAX 16u     /* canary bytes written and checked past a request */
#define HARD_FILL_MAX 64u       /* bytes of a quarantined block, its mark included, filled and checked */
#define HARD_STASH 32u          /* free blocks of a class a thread keeps at most */
#define HARD_STASH_BYTES 16384u /* ... fewer of large classes: 2 at least */
#define HARD_QUAR_SLOTS 1024u   /* quarantined blocks a thread holds at most */
#define HARD_QUAR_SHARED 4u     /* threads whose quarantines are held in full; more share that much */
#define HARD_RETURN 16u         /* blocks leaving the quarantine sent back at once */
#define HARD_SMALL_TAIL 24u     /* canary (8 at least), size word, next head guard */
#define HARD_LARGE_TAIL 16u     /* canary (8 at least), size word; then the guard page */

/* Two random words: a block's key is the mix of its address and secret,
 * XORed with key_mask. The mix alone can be undone, so one block's key
 * (which an over-read of its canary shows) would give the secret, and
 * with it every other block's key; with the mask, what one key shows is
 * the sum of two unknowns. */
static uint64_t secret, key_mask;
/* what a quarantined block is filled with: one random byte, repeated */
static uint64_t fill_word;
/* How many free blocks of each class a thread keeps to pick from (set at
 * init: no division on the way) */
static uint8_t stash_caps[HAK_NCLASS];
/* The hit path's block-start checks by class (hak_class_magic), taken at
 * init for free_fast; the shared table's rows then fail every pointer
 * (below, hard_init). */
static struct hak_class_check live_checks[HAK_NBINS];
/* Threads that have their state, and the bytes each one's quarantine
 * holds at most: HAKMEM_QUARANTINE_KB while HARD_QUAR_SHARED threads or
 * fewer have one, and that many quarantines' worth shared by all beyond:
 * each thread's quarantine pins its blocks' pages, and a process of many
 * threads would hold as many of them (0: no quarantine). Both relaxed
 * atomics, written when a thread takes or gives back its state, on a
 * line of their own: the keys every call reads stay clean. */
static struct {
    _Alignas(64) unsigned threads;
    size_t budget;
} quar_share;   /* aligned: its size is a whole line */

/* A block's key, from which its canary, size check, head guard and marks
 * derive; one mix per call that needs any of them. */
static inline uint64_t block_key(const void *p) {
    return hak_mix64((uintptr_t)p ^ secret) ^ key_mask;
}
/* A head guard is its block's size word with its check half turned: n
 * stays readable in its low half, and arm and the size word's check
 * compute one check word, not two. */
#define HEAD_OF(sw) ((sw) ^ 0x6865616400000000ull)
#define QUAR_OF(k) ((k) ^ 0x7175617271756172ull)
#define STASH_OF(k) ((k) ^ 0x737461736873ull)     /* in a stash, from the heap */

typedef uint64_t __attribute__((may_alias, aligned(1))) word_any;
typedef uint64_t __attribute__((may_alias)) word64;

struct hard_thread {
    uint64_t rng;
    size_t quar_bytes;
    unsigned quar_head, quar_count, nreturn;
    uint8_t nstash[HAK_NCLASS];
    /* 1 once the thread mallocs the class (from its stash, or filling
     * it from its heap) */
    uint8_t allocates[HAK_NCLASS];
    void *returning[HARD_RETURN];      /* out of quarantine, checked, still marked */
    /* What follows is read only below the counts above: it is not zeroed
     * when a thread takes its state, so the pages of classes the thread
     * never uses stay untouched. */
    /* each stashed block with its key, so that malloc makes no key mix:
     * a refill computes it for the block's stash mark, an eviction has it
     * from the quarantine slot */
    struct stash_slot { void *p; uint64_t k; } stash[HAK_NCLASS][HARD_STASH];
    /* block | class << 56, and the block's quarantine mark: its check
     * at eviction needs no key mix of its own */
    struct quar_slot { uintptr_t at; uint64_t mark; } quar[HARD_QUAR_SLOTS];
};

/* The thread's state lives in a block of its own heap, taken at its first
 * call and given back at its exit. */
static __thread struct hard_thread *hard_self __attribute__((tls_model("initial-exec")));

static void hard_link_bad(const void *blk) {
    hak_report_bad("free-list", blk, HAK_REASON_LINK);
}

static HAK_COLD void budget_update(int delta) {
    size_t full = (size_t)hak_opt(HAK_OPT_QUARANTINE_KB) << 10;
    unsigned n = __atomic_add_fetch(&quar_share.threads, (unsigned)delta, __ATOMIC_RELAXED);
    for (;;) {
        size_t b = n <= HARD_QUAR_SHARED ? full : full * HARD_QUAR_SHARED / n;
        __atomic_store_n(&quar_share.budget, full && !b ? 1 : b, __ATOMIC_RELAXED);
        /* another thread's store meanwhile, of an older count, is redone */
        unsigned now = __atomic_load_n(&quar_share.threads, __ATOMIC_RELAXED);
        if (now == n) return;
        n = now;
    }
}

static HAK_COLD void hard_init(void) {
    /* independent words: none derives from another, so no stored value
     * (a fill byte, a link, a canary) leads back to the secret */
    uint64_t r[4] = { 0, 0, 0, 0 };
    if (!hak_os_random(r, sizeof r)) {
        /* no kernel randomness: the clock and addresses, which ASLR varies */
        uint64_t seed = (uint64_t)hak_os_clock_ms() ^ (uintptr_t)&r ^ ((uint64_t)hak_os_getpid() << 32) ^
                        (uintptr_t)&secret;
        for (unsigned i = 0; i < 4; i++) r[i] = hak_mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1));
    }
    secret = r[0] | 1;
    key_mask = r[1];
    fill_word = ((r[2] | 1) & 0xff) * 0x0101010101010101ull;
    for (unsigned c = 1; c < HAK_NCLASS; c++) {
        unsigned want = hak_class_size[c] ? HARD_STASH_BYTES / hak_class_size[c] : HARD_STASH;
        stash_caps[c] = (uint8_t)(want < 2 ? 2 : want > HARD_STASH ? HARD_STASH : want);
    }
    hak_link_bad = hard_link_bad;
    hak_link_key = (uintptr_t)r[3] | 1;
    budget_update(0);
    /* The tag window stays on (api/init.c) for free_fast's ownership
     * test, but the hit paths and hak_free_miss read the same tags: each
     * class's shared row becomes { 1, 0 }, which no pointer passes and
     * whose nonzero mul keeps hak_free_miss off its multi-slab branch, so
     * every free, realloc and malloc_usable_size still reaches this box. */
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NBINS; c++) {
        live_checks[c] = hak_class_magic[c];
        hak_class_magic[c] = (struct hak_class_check){ 1, 0 };
    }
}

static HAK_COLD size_t small_need(size_t size) {
    size_t need = size + HARD_SMALL_TAIL;
    if (need < size) return SIZE_MAX;
    return need < 32 ? 32 : need;   /* a free block's link words stay clear of the size word */
}

static HAK_COLD size_t large_need(size_t size) {
    size_t need = size + HARD_LARGE_TAIL + HAK_PAGE_SIZE;
    return need < size ? SIZE_MAX : need;
}

/* ---- the guards ------------------------------------------------------- */

/* Where a small block's size word ends (C - 8), or where a large block's
 * guard page begins. */
static inline size_t guard_end(size_t usable, int large) {
    return large ? usable - HAK_PAGE_SIZE : usable - 8;
}

/* 1 when block p has a slot before it in its run, whose last word is p's
 * head guard (runs start on a slab boundary; the first block of each slab
 * of a run is left out, whose slab may begin with the SuperSlab's header). */
static inline int has_head_guard(const void *p, int large) {
    return !large && ((uintptr_t)p & (HAK_SLAB_SIZE - 1)) != 0;
}

/* The canary's bytes are the key's, counted from the end of the request:
 * its first word is the key itself, and its last, which may overlap the
 * first, the key turned by its offset from the request's end. */
static inline uint64_t canary_tail(uint64_t k, size_t from_request) {
    unsigned r = (unsigned)(from_request & 7) * 8;
    return r ? (k >> r) | (k << (64 - r)) : k;
}

/* Where the canary's last word starts, counted from the request's end:
 * the canary runs from the request's end for HARD_CANARY_MAX bytes, or to
 * the size word where the slack is shorter (8 bytes at least: the layout
 * keeps them), as two words that may overlap. Two stores or loads and no
 * loop: an overflow of 1 to 16 bytes changes the first byte past the
 * request, and one that skips bytes is caught within 16 of them. */
_Static_assert(HARD_CANARY_MAX == 16, "the canary is two words at most");
static inline size_t canary_last(size_t size, size_t end) {
    size_t room = end - 16 - size;   /* the slack before the size word, less a word */
    return room < HARD_CANARY_MAX - 8 ? room : HARD_CANARY_MAX - 8;
}

/* 0 when the canary past a request of size, in a block whose guards end
 * at end, is as arm_key wrote it. */
static inline uint64_t canary_diff(const char *c, size_t size, size_t end, uint64_t k) {
    size_t last = canary_last(size, end);
    const char *at = c + size;
    return (*(const word_any *)at ^ k) | (*(const word_any *)(at + last) ^ canary_tail(k, last));
}

static inline uint64_t size_word(uint64_t k, size_t size) {
    uint64_t tag = ((k ^ ((uint64_t)size * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull) >> 32;
    return (uint64_t)size | tag << 32;
}

/* Writes block p's guards (k its key) for a request of size, in a block
 * whose guards end at end (guard_end). */
static inline void arm_key(char *c, size_t size, size_t end, uint64_t k, int head) {
    size_t last = canary_last(size, end);
    char *at = c + size;
    *(word_any *)at = k;
    *(word_any *)(at + last) = canary_tail(k, last);
    uint64_t sw = size_word(k, size);
    *(word64 *)(c + end - 8) = sw;
    if (head) *(word64 *)(c - 8) = HEAD_OF(sw);
}

static HAK_COLD void arm(void *p, size_t size, size_t usable, int large) {
    char *c = p;
    /* a block of a larger class may stand in for the one asked
     * (backend/heap_refill.c): its run says what it is */
    if (!large) usable = hak_slab_of(hak_ss_of(p), p)->block_size;
    size_t end = guard_end(usable, large);
    arm_key(c, size, end, block_key(p), has_head_guard(p, large));
    if (large) hak_os_guard(c + end, HAK_PAGE_SIZE, 1);
}

/* What is wrong with block p's guards (k its key, end as guard_end
 * says), or NULL with the size it was asked with in *size. */
static inline const char *guard_fault(const char *c, size_t end, uint64_t k, int head, size_t *size) {
    uint64_t w = *(const word64 *)(c + end - 8);
    size_t n = (uint32_t)w;
    if (n + 16 > end || w != size_word(k, n)) return HAK_REASON_OVERFLOW;
    uint64_t diff = canary_diff(c, n, end, k);
    if (diff) return HAK_REASON_OVERFLOW;
    /* a head guard on a page of its own reads zero once the free blocks
     * before it went hollow (backend/heap_hollow.c gives their pages back) */
    uint64_t h;
    if (head && (h = *(const word64 *)(c - 8)) != HEAD_OF(w) &&
        !(h == 0 && !((uintptr_t)c & (HAK_PAGE_SIZE - 1))))
        return HAK_REASON_UNDERFLOW;
    *size = n;
    return NULL;
}

/* 1 when block p's guards hold as far as free's common path looks: n from
 * the head guard (no load of the size word's line), then the canary; the
 * full guard_fault for a block with no head guard, or when the head guard
 * does not hold (an underflow, or a page gone hollow before it: the
 * caller's general path then tells which). */
static inline int guards_hold(const char *c, size_t end, uint64_t k) {
    size_t n;
    if (!has_head_guard(c, 0)) return guard_fault(c, end, k, 0, &n) == NULL;
    uint64_t h = *(const word64 *)(c - 8);
    n = (uint32_t)h;
    if (n + 16 > end || h != HEAD_OF(size_word(k, n))) return 0;
    uint64_t diff = canary_diff(c, n, end, k);
    return diff == 0;
}

static HAK_COLD size_t check(const char *op, void *p, size_t usable, int large) {
    size_t size;
    const char *fault = guard_fault(p, guard_end(usable, large), block_key(p), has_head_guard(p, large), &size);
    if (fault) {
        hak_report_bad(op, p, fault);
        return SIZE_MAX;
    }
    return size;
}

static HAK_COLD void disarm_large(void *p, size_t usable) {
    hak_os_guard((char *)p + guard_end(usable, 1), HAK_PAGE_SIZE, 0);
}

/* ---- blocks to and from the heap -------------------------------------- */

/* n blocks (the program's once, freed now) back to their runs or owners. */
static void to_heap(struct hak_tls *t, void *const *v, unsigned n) {
    struct hak_bin chain = { .head = NULL, .room = 0, .max = n };
    for (unsigned i = 0; i < n; i++) {
        hak_block_freed(v[i]);
        hak_list_set(v[i], chain.head);
        chain.head = v[i];
    }
    hak_heap_flush(t->heap, &chain, n, 0);
}

static struct hard_thread *self_of(struct hak_tls *t) {
    struct hard_thread *s = hard_self;
    if (HAK_LIKELY(s != NULL)) return s;
    s = hak_heap_take_one(t->heap, hak_class_of(sizeof *s));
    if (!s) return NULL;
    memset(s, 0, offsetof(struct hard_thread, stash));
    s->rng = hak_mix64(secret ^ (uintptr_t)s) | 1;
    hard_self = s;
    budget_update(1);
    return s;
}

static inline uint64_t next_random(struct hard_thread *s) {
    uint64_t x = s->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s->rng = x;
    return x;
}

static inline unsigned stash_cap(unsigned cls) { return stash_caps[cls]; }

/* A random index below n (n <= HARD_STASH), by multiply: no division. */
static inline unsigned random_below(struct hard_thread *s, unsigned n) {
    return (unsigned)(((next_random(s) >> 32) * n) >> 32);
}

/* The stash's top, the block the next take of its class returns: its
 * first line (mark and fill, read by take) and last (arm writes it),
 * fetched ahead of that call. */
static inline void prefetch_top(const struct stash_slot *top, unsigned cls) {
    __builtin_prefetch(top->p, 1);
    __builtin_prefetch((char *)top->p + hak_class_size[cls] - 16, 1);
}

/* Fills class cls's empty stash from the heap, to half its room: several
 * blocks under one lock. A stash whose frees and mallocs of its class
 * come in random turns (a random walk) then starts as far from empty as
 * from full, and next reaches either only after about (room / 2)^2 of
 * them; filled to the top, every other eviction of the class would
 * overflow to the heap soon after. The other end is the same: a full
 * stash gives back half (spill_half_push). */
static unsigned stash_fill(struct hak_tls *t, struct hard_thread *s, unsigned cls) {
    unsigned want = stash_cap(cls) / 2;
    struct hak_bin chain = { 0 };   /* no room: carves no more than asked */
    unsigned got = hak_heap_refill(t->heap, cls, &chain, want, 1), n = 0;
    s->allocates[cls] = 1;
    struct stash_slot *v = s->stash[cls];
    for (void *q = chain.head; q && n < got; n++) {
        void *next = hak_list_get(q);
        uint64_t k = block_key(q);
        /* a free of it, never handed out, finds this mark */
        *(word64 *)q = STASH_OF(k);
        /* the random order, given once: each block enters at a random
         * place among those before it (a run's blocks come in address
         * order), and the stash is taken from its top */
        unsigned j = random_below(s, n + 1);
        v[n] = v[j];
        v[j] = (struct stash_slot){ q, k };
        q = next;
    }
    if (n) prefetch_top(&v[n - 1], cls);
    return n;
}

static inline int still_poisoned(const void *p, size_t bs, uint64_t mark);

/* A stashed block as it was put there: its mark, and the fill of one that
 * came out of the quarantine (a write after free there is found now). */
static int stash_intact(const void *p, uint64_t k, unsigned cls) {
    uint64_t w = *(const word64 *)p;
    if (w == STASH_OF(k)) return 1;
    /* only blocks of the class itself come back from the quarantine (a
     * block standing in for a smaller class comes from the heap) */
    return still_poisoned(p, hak_class_size[cls], QUAR_OF(k));
}

static HAK_COLD void *take(struct hak_tls *t, unsigned cls) {
    struct hard_thread *s = self_of(t);
    void *p;
    if (!s) {
        p = hak_heap_take_one(t->heap, cls);
    } else {
        unsigned n = s->nstash[cls];
        if (!n && !(n = stash_fill(t, s, cls))) return NULL;
        struct stash_slot *v = s->stash[cls];
        p = v[--n].p;
        s->nstash[cls] = (uint8_t)n;
        s->allocates[cls] = 1;
        if (HAK_UNLIKELY(!stash_intact(p, v[n].k, cls))) {
            hak_report_bad("malloc", p, HAK_REASON_WRITE_FREED);
            return take(t, cls);   /* that one stays out of use */
        }
    }
    if (p) {
        hak_mark_clear(p);
        ((word64 *)p)[1] = 0;   /* the link's check word */
    }
    return p;
}

/* ---- quarantine -------------------------------------------------------- */

/* Words of a quarantined block past its mark that the fill covers: the
 * block's first 64 bytes (the whole of a block up to 80 bytes). A write
 * after free lands most often in an object's first fields (its header,
 * reference count, links, vtable pointer), and the first line is the one
 * free reads anyway (the mark): a longer fill costs a cache line more per
 * 64 bytes at free and again when the block leaves the quarantine
 * (docs/PERFORMANCE.md, "Safety check cost"). */
static inline size_t fill_words(size_t bs) {
    size_t end = bs - 16;   /* the size word and the next head guard stay */
    return ((end < HARD_FILL_MAX ? end : HARD_FILL_MAX) - 8) / 8;
}

/* The fill's common case, a block's first 64 bytes, in 16-byte words
 * (blocks are 16-byte aligned): four stores, or four loads and one test. */
typedef uint64_t __attribute__((vector_size(16), may_alias)) word128;

static inline void poison(void *p, size_t bs, uint64_t mark) {
    word64 *w = p;
    if (HAK_LIKELY(bs >= HARD_FILL_MAX + 16)) {   /* fill_words(bs): the whole 64 bytes */
        word128 *v = p, f = { fill_word, fill_word };
        v[0] = (word128){ mark, fill_word };
        v[1] = f;
        v[2] = f;
        v[3] = f;
        return;
    }
    size_t n = fill_words(bs);
    w[0] = mark;
    for (size_t i = 1; i <= n; i++) w[i] = fill_word;
}

/* Block p (of bs bytes) filled and marked as poison left it. */
static inline int still_poisoned(const void *p, size_t bs, uint64_t mark) {
    const word64 *w = p;
    if (HAK_LIKELY(bs >= HARD_FILL_MAX + 16)) {   /* fill_words(bs): the whole 64 bytes */
        const word128 *v = p, f = { fill_word, fill_word };
        word128 d = (v[0] ^ (word128){ mark, fill_word }) | (v[1] ^ f) | (v[2] ^ f) | (v[3] ^ f);
        return (d[0] | d[1]) == 0;
    }
    size_t n = fill_words(bs);
    uint64_t diff = w[0] ^ mark;
    for (size_t i = 1; i <= n; i++) diff |= w[i] ^ fill_word;
    return diff == 0;
}

static HAK_NOINLINE void return_all(struct hak_tls *t, struct hard_thread *s) {
    if (s->nreturn) to_heap(t, s->returning, s->nreturn);
    s->nreturn = 0;
}

/* Class cls's stashed blocks from slot `keep` up go back to the heap in
 * one batch; those below stay. */
static void stash_to_heap(struct hak_tls *t, struct hard_thread *s, unsigned cls, unsigned keep) {
    unsigned n = s->nstash[cls];
    if (n <= keep) return;
    void *v[HARD_STASH];
    for (unsigned i = keep; i < n; i++) v[i - keep] = s->stash[cls][i].p;
    s->nstash[cls] = (uint8_t)keep;
    to_heap(t, v, n - keep);
}

/* Class cls's full stash gives its upper half back to the heap in one
 * batch (see stash_fill): the blocks below, which a malloc takes after
 * those, stay. Each keeps its mark until to_heap links it. Then block p
 * (key k) goes on top: evict's tail call, as is return_all. */
static HAK_NOINLINE void spill_half_push(struct hak_tls *t, struct hard_thread *s, unsigned cls, void *p,
                                         uint64_t k) {
    stash_to_heap(t, s, cls, s->nstash[cls] / 2);
    s->stash[cls][s->nstash[cls]++] = (struct stash_slot){ p, k };
}

/* The oldest quarantined block leaves: back to its heap (in batches) if
 * untouched; kept out of use (lost) after a report. Until its batch goes,
 * it keeps its quarantine mark (a second free of it is still found). */
static void evict(struct hak_tls *t, struct hard_thread *s) {
    uintptr_t e = s->quar[s->quar_head].at;
    uint64_t mark = s->quar[s->quar_head].mark;
    s->quar_head = (s->quar_head + 1) % HARD_QUAR_SLOTS;
    s->quar_count--;
    void *p = (void *)(e & (((uintptr_t)1 << 56) - 1));
    unsigned cls = (unsigned)(e >> 56);
    size_t bs = hak_class_size[cls];
    s->quar_bytes -= bs;
    if (!still_poisoned(p, bs, mark)) {
        hak_report_bad("free", p, HAK_REASON_WRITE_FREED);
        return;
    }
    /* it joins its class's stash (a full one gives half back first): no
     * lock, no list.
     * In a thread that allocates the class, whichever heap owns it (as
     * the default's bins take any block of their class): a block another
     * thread allocated is reused here rather than sent to its owner,
     * whose next refill would take it back through its inbox (larson:
     * most frees are of such blocks). A thread that only frees the class
     * (a consumer) keeps none of other heaps' blocks for mallocs it never
     * makes: they go home. */
    if (s->allocates[cls] || hak_ss_owner(hak_ss_of(p)) == t->heap) {
        if (HAK_UNLIKELY(s->nstash[cls] == stash_cap(cls))) {
            spill_half_push(t, s, cls, p, mark ^ QUAR_OF(0));
            return;
        }
        /* it keeps its quarantine mark (a free of it is a double free)
         * and its fill, checked again when taken; on top, the next
         * malloc of the class takes it while the check above left its
         * first line in the cache */
        s->stash[cls][s->nstash[cls]++] = (struct stash_slot){ p, mark ^ QUAR_OF(0) };
        /* and the line of its size word, which that malloc writes */
        __builtin_prefetch((char *)p + bs - 16, 1);
        return;
    }
    s->returning[s->nreturn++] = p;
    if (s->nreturn == HARD_RETURN) return_all(t, s);
}

/* Block p of class cls (mark: its quarantine mark) joins the thread's
 * quarantine, filled; the oldest leave while it holds more than budget
 * bytes. */
static inline void quarantine(struct hak_tls *t, struct hard_thread *s, void *p, unsigned cls, size_t budget,
                              uint64_t mark) {
    size_t bs = hak_class_size[cls];
    poison(p, bs, mark);
    s->quar[(s->quar_head + s->quar_count) % HARD_QUAR_SLOTS] =
        (struct quar_slot){ (uintptr_t)p | (uintptr_t)cls << 56, mark };
    s->quar_count++;
    s->quar_bytes += bs;
    while (s->quar_count == HARD_QUAR_SLOTS || (s->quar_bytes > budget && s->quar_count > 1)) evict(t, s);
    /* the next free evicts the oldest: its mark and fill, fetched now */
    __builtin_prefetch((void *)(s->quar[s->quar_head].at & (((uintptr_t)1 << 56) - 1)), 1);
}

static HAK_COLD void release_small(struct hak_tls *t, void *p, unsigned cls) {
    struct hard_thread *s = self_of(t);
    size_t budget = __atomic_load_n(&quar_share.budget, __ATOMIC_RELAXED);
    if (!s || !budget) {
        to_heap(t, &p, 1);
        return;
    }
    quarantine(t, s, p, cls, budget, QUAR_OF(block_key(p)));
}

static HAK_COLD void thread_exit(struct hak_tls *t) {
    struct hard_thread *s = hard_self;
    if (!s) return;
    while (s->quar_count) evict(t, s);
    return_all(t, s);
    for (unsigned c = 0; c < HAK_NCLASS; c++) stash_to_heap(t, s, c, 0);
    hard_self = NULL;
    budget_update(-1);
    void *self = s;
    to_heap(t, &self, 1);
}

static HAK_COLD void fork_child(void) {
    __atomic_store_n(&quar_share.threads, 0, __ATOMIC_RELAXED);
    budget_update(hard_self != NULL);
}

/* ---- the thread's cache: malloc and free in one call each --------------- */

/* Laid out with the cold text (the default box never runs them), but
 * compiled for speed, as cold functions are not: the hardened box's
 * every call runs them. */
#define HARD_FAST __attribute__((noinline, section(".text.unlikely.hakmem_hardened")))

/* The class of a need (the request and its tail, 24 bytes or more: the
 * 32-byte floor of small_need is the class of 32 anyway), by the hit
 * path's tables, filled at init: no search. */
static inline unsigned class_by_table(size_t need) {
    size_t at = need <= HAK_TINY_MAX ? hak_tiny_bin_of(need) : hak_mid_bin_of(need);
    return (unsigned)(at / HAK_TAG_SCALE);
}

/* A stashed block written after its free: reported and kept out of use;
 * the malloc goes on (a call of its own, at the end of malloc_fast, which
 * then keeps nothing across a call and needs no stack frame). */
static HAK_NOINLINE void *written_after_free(void *p, size_t size, void *(*general)(size_t size)) {
    hak_report_bad("malloc", p, HAK_REASON_WRITE_FREED);
    return general(size);
}

/* malloc of a small block from the thread's stash, guards written: the
 * same steps as the API's path through take and arm, with the key the
 * stash keeps and no call on the way. A request that is not that case
 * (no state yet for the thread, a large request, an empty stash) goes on
 * to general, the API's path, which also refills. */
static HARD_FAST void *malloc_fast(size_t size, void *(*general)(size_t size)) {
    struct hard_thread *s = hard_self;   /* set: the thread has its heap (state 1) */
    if (HAK_UNLIKELY(s == NULL) || size > HAK_SMALL_MAX - HARD_SMALL_TAIL) return general(size);
    unsigned cls = class_by_table(size + HARD_SMALL_TAIL);
    unsigned n = s->nstash[cls];
    if (HAK_UNLIKELY(n == 0)) return general(size);
    struct stash_slot *v = &s->stash[cls][--n];
    char *p = v->p;
    uint64_t k = v->k, w = *(const word64 *)p;
    s->nstash[cls] = (uint8_t)n;
    s->allocates[cls] = 1;   /* its stash may have been filled by evictions alone */
    if (n) prefetch_top(v - 1, cls);
    size_t bs = hak_class_size[cls];
    if (w == STASH_OF(k)) {
        /* from the heap: it may be of a larger class standing in */
        bs = hak_slab_of(hak_ss_of(p), p)->block_size;
    } else if (HAK_UNLIKELY(!still_poisoned(p, bs, QUAR_OF(k)))) {
        return written_after_free(p, size, general);
    }
    hak_mark_clear(p);
    ((word64 *)p)[1] = 0;   /* the link's check word */
    arm_key(p, size, guard_end(bs, 0), k, has_head_guard(p, 0));
    return p;
}

/* The class of p when it is a carved block start of a run with no hollow
 * blocks, by its run (0 otherwise): for the pointers the tag window does
 * not answer (outside it, on a page not wholly carved yet, with
 * HAKMEM_TAG_WINDOW=0, or of a class whose blocks span slabs). */
static HAK_NOINLINE unsigned run_block_class(void *p) {
    unsigned e = hak_chunk_entry(p);
    if (hak_entry_kind(e) != HAK_CHUNK_SS_CHECKED) return 0;
    unsigned row = e & ~(unsigned)HAK_SS_ENTRY_CHECKED, slab = hak_slab_index(p);
    unsigned cls = hak_ss_tag(row, slab);
    /* a run with hollow blocks: the full check knows about them */
    if (cls == HAK_CLASS_INVALID || hak_ss_tag_hollow(row, slab)) return 0;
    struct hak_slab *sl = hak_slab_of(hak_ss_of(p), p);
    if (!hak_slab_is_block_start(sl, p) || !hak_slab_block_carved(sl, p)) return 0;
    return cls;
}

/* free of a live small block whose guards are intact, into the
 * quarantine: the checks of hardened_classify, check and release_small
 * with one key mix. Anything else goes on, untouched, to general, the
 * API's path, which checks it again and reports what is wrong. */
static HARD_FAST void free_fast(void *p, void (*general)(void *p)) {
    struct hard_thread *s = hard_self;
    size_t budget = __atomic_load_n(&quar_share.budget, __ATOMIC_RELAXED);
    if (HAK_UNLIKELY(s == NULL) || !budget) goto general_path;
    /* the block's first line (its mark, and its head guard unless it
     * starts a line), which the checks below wait for: asked for before
     * them (a prefetch of any address is harmless) */
    __builtin_prefetch(p);
    __builtin_prefetch((const char *)p - 8);
    uintptr_t tag = hak_window_tag(p);
    unsigned cls = (unsigned)(tag / HAK_TAG_SCALE);
    if (HAK_LIKELY(tag < HAK_TAG_HOLLOW && live_checks[cls].limit)) {
        /* the hit path's test, on the box's own copy of its table: a
         * block start of the page's run, every block of the page carved */
        if ((uint64_t)(uint16_t)(uintptr_t)p * live_checks[cls].mul >= live_checks[cls].limit) goto general_path;
    } else if (!(cls = run_block_class(p))) {
        goto general_path;
    }
    /* The canary lies in the block's last lines, within a class step (an
     * eighth to a quarter) before its end: its loads would wait for the
     * head guard's line, which says where it starts. They start now. */
    const char *end = (const char *)p + hak_class_size[cls] - 16;
    __builtin_prefetch(end);
    __builtin_prefetch(end - 64);
    __builtin_prefetch(end - 128);
    if (hak_mark_is_set(p)) goto general_path;
    uint64_t k = block_key(p), w = *(const word64 *)p;
    if (w == QUAR_OF(k) || w == STASH_OF(k) || !guards_hold(p, guard_end(hak_class_size[cls], 0), k))
        goto general_path;
    quarantine(&hak_tls, s, p, cls, budget, QUAR_OF(k));
    return;
general_path:
    general(p);   /* a tail call */
}

/* ---- the box ----------------------------------------------------------- */

static HAK_COLD enum hak_ptr_kind hardened_classify(const void *p, struct hak_ptr_info *info) {
    enum hak_ptr_kind k = hak_classify_in_chunk(p, hak_chunk_entry(p), 1, info);
    if (k == HAK_PTR_SMALL) {
        uint64_t w = *(const word64 *)p, key = block_key(p);
        if (w == QUAR_OF(key)) {
            info->reason = HAK_REASON_DOUBLE;
            return HAK_PTR_INVALID;
        }
        if (w == STASH_OF(key)) {
            info->reason = HAK_REASON_NOT_LIVE;
            return HAK_PTR_INVALID;
        }
    }
    return k;
}

static const struct hak_hardened_ops hardened_ops = {
    .init = hard_init,
    .small_need = small_need,
    .large_need = large_need,
    .take = take,
    .arm = arm,
    .check = check,
    .release_small = release_small,
    .disarm_large = disarm_large,
    .thread_exit = thread_exit,
    .fork_child = fork_child,
    .malloc_fast = malloc_fast,
    .free_fast = free_fast,
};

const struct hak_safety_ops hak_safety_hardened = {
    .name = "hardened",
    .ss_entry_flag = HAK_SS_ENTRY_CHECKED,
    .classify = hardened_classify,
    .hardened = &hardened_ops,
};
