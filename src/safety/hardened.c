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
 *   [C - 8, C)      the next block's head guard, keyed by its address
 * so an overflow of up to 16 bytes lands in the canary or the size word
 * and an underflow in the head guard; both are checked at free, realloc
 * and malloc_usable_size. (A block that starts a page accepts a head
 * guard of zero: the free blocks before it may have gone hollow.) A large block ends the same way, followed by an
 * inaccessible guard page (the last page of its span), so an overflow
 * that runs on faults. Freed small blocks wait in a per-thread quarantine
 * (HAKMEM_QUARANTINE_KB) filled with a pattern, checked when they leave
 * it: a write after free is reported then, a read after free sees the
 * pattern, and a second free of a block in there (from any thread) finds
 * its quarantine mark. Blocks come from a few kept per class, picked at
 * random. The free-list links of the backend are keyed (base/link_guard.h).
 * Every key derives from one random secret taken at init. */
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

#define HARD_CANARY_MAX 64u     /* canary bytes written and checked past a request */
#define HARD_FILL_MAX 4096u     /* bytes of a quarantined block filled and checked */
#define HARD_STASH 4u           /* free blocks of a class a thread picks from */
#define HARD_QUAR_SLOTS 1024u   /* quarantined blocks a thread holds at most */
#define HARD_SMALL_TAIL 24u     /* canary (8 at least), size word, next head guard */
#define HARD_LARGE_TAIL 16u     /* canary (8 at least), size word; then the guard page */

static uint64_t secret;

/* keys for each use of the secret, so that one leaked value tells nothing
 * of the others */
static inline uint64_t key_of(const void *p, uint64_t use) {
    return hak_mix64((uintptr_t)p ^ secret ^ use);
}
#define USE_CANARY 0x63616e617279ull
#define USE_SIZE 0x73697a65ull
#define USE_HEAD 0x68656164ull
#define USE_QUAR 0x71756172ull
#define USE_STASH 0x7374617368ull
#define USE_FILL 0x66696c6cull

typedef uint64_t __attribute__((may_alias)) word64;

struct hard_thread {
    uint64_t rng;
    size_t quar_bytes;
    unsigned quar_head, quar_count;
    uint8_t nstash[HAK_NCLASS];
    void *stash[HAK_NCLASS][HARD_STASH];
    uintptr_t quar[HARD_QUAR_SLOTS];   /* block | class << 56 */
};

/* The thread's state lives in a block of its own heap, taken at its first
 * call and given back at its exit. */
static __thread struct hard_thread *hard_self __attribute__((tls_model("initial-exec")));

static void hard_link_bad(const void *blk) {
    hak_report_bad("free-list", blk, HAK_REASON_LINK);
}

static void hard_init(void) {
    uint64_t s = 0;
    if (!hak_os_random(&s, sizeof s)) {
        /* no kernel randomness: the clock and addresses, which ASLR varies */
        s = hak_mix64((uint64_t)hak_os_clock_ms() ^ (uintptr_t)&s ^ ((uint64_t)hak_os_getpid() << 32) ^
                      (uintptr_t)&secret);
    }
    secret = s | 1;
    hak_link_bad = hard_link_bad;
    hak_link_key = (uintptr_t)hak_mix64(secret ^ 0x6c696e6bull) | 1;
}

static size_t small_need(size_t size) {
    size_t need = size + HARD_SMALL_TAIL;
    if (need < size) return SIZE_MAX;
    return need < 32 ? 32 : need;   /* a free block's link words stay clear of the size word */
}

static size_t large_need(size_t size) {
    size_t need = size + HARD_LARGE_TAIL + HAK_PAGE_SIZE;
    return need < size ? SIZE_MAX : need;
}

/* ---- the guards ------------------------------------------------------- */

/* The first bytes past a small block's request and its size word: where
 * the size word ends (C - 8), or for a large block where the guard page
 * begins. */
static inline size_t guard_end(size_t usable, int large) {
    return large ? usable - HAK_PAGE_SIZE : usable - 8;
}

/* 1 when block p has a slot before it in its run, whose last word is p's
 * head guard (the first block of a slab, or of a run spanning slabs, has
 * the slab's start or the SuperSlab's header before it). */
static int has_head_guard(const void *p, int large) {
    if (large) return 0;
    if (!((uintptr_t)p & (HAK_SLAB_SIZE - 1))) return 0;
    struct hak_superslab *ss = hak_ss_of(p);
    struct hak_slab *s = hak_slab_of(ss, p);
    return (char *)p != hak_slab_start(s);
}

static inline uint8_t canary_byte(uint64_t key, size_t i) { return (uint8_t)(key >> ((i & 7) * 8)); }

static inline uint64_t size_word(const void *p, size_t size) {
    return (uint64_t)size | (key_of(p, USE_SIZE ^ size) << 32);
}

static void arm(void *p, size_t size, size_t usable, int large) {
    char *c = p;
    /* a block of a larger class may stand in for the one asked
     * (backend/heap_refill.c): its run says what it is */
    if (!large) usable = hak_slab_of(hak_ss_of(p), p)->block_size;
    size_t end = guard_end(usable, large);
    uint64_t key = key_of(p, USE_CANARY);
    size_t stop = end - 8 < size + HARD_CANARY_MAX ? end - 8 : size + HARD_CANARY_MAX;
    for (size_t i = size; i < stop; i++) c[i] = (char)canary_byte(key, i);
    *(word64 *)(c + end - 8) = size_word(p, size);
    if (has_head_guard(p, large)) *(word64 *)(c - 8) = key_of(p, USE_HEAD);
    if (large) hak_os_protect(c + end, HAK_PAGE_SIZE, 0);
}

static size_t check(const char *op, void *p, size_t usable, int large) {
    const char *c = p;
    size_t end = guard_end(usable, large);
    uint64_t w = *(const word64 *)(c + end - 8);
    size_t size = (uint32_t)w;
    if (size > end - 8 || w != size_word(p, size)) {
        hak_report_bad(op, p, HAK_REASON_OVERFLOW);
        return SIZE_MAX;
    }
    uint64_t key = key_of(p, USE_CANARY);
    size_t stop = end - 8 < size + HARD_CANARY_MAX ? end - 8 : size + HARD_CANARY_MAX;
    for (size_t i = size; i < stop; i++)
        if ((uint8_t)c[i] != canary_byte(key, i)) {
            hak_report_bad(op, p, HAK_REASON_OVERFLOW);
            return SIZE_MAX;
        }
    /* a head guard on a page of its own reads zero once the free blocks
     * before it went hollow (backend/heap_hollow.c gives their pages back) */
    uint64_t head;
    if (has_head_guard(p, large) && (head = *(const word64 *)(c - 8)) != key_of(p, USE_HEAD) &&
        !(head == 0 && !((uintptr_t)p & (HAK_PAGE_SIZE - 1)))) {
        hak_report_bad(op, p, HAK_REASON_UNDERFLOW);
        return SIZE_MAX;
    }
    return size;
}

static void disarm_large(void *p, size_t usable) {
    hak_os_protect((char *)p + guard_end(usable, 1), HAK_PAGE_SIZE, 1);
}

/* ---- blocks to and from the heap -------------------------------------- */

static void to_heap(struct hak_tls *t, void *p) {
    struct hak_bin one = { .head = p, .room = 0, .max = 1 };
    hak_block_freed(p);
    hak_link_set(p, NULL);   /* a bin's link: plain */
    hak_heap_flush(t->heap, &one, 1, 0);
}

static struct hard_thread *self_of(struct hak_tls *t) {
    struct hard_thread *s = hard_self;
    if (HAK_LIKELY(s != NULL)) return s;
    s = hak_heap_take_one(t->heap, hak_class_of(sizeof *s));
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    s->rng = hak_mix64(secret ^ (uintptr_t)s) | 1;
    hard_self = s;
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

static void *take(struct hak_tls *t, unsigned cls) {
    struct hard_thread *s = self_of(t);
    void *p;
    if (!s) {
        p = hak_heap_take_one(t->heap, cls);
    } else {
        unsigned n = s->nstash[cls];
        while (n < HARD_STASH && (p = hak_heap_take_one(t->heap, cls)) != NULL) {
            /* a free of it, never handed out, finds this mark */
            *(word64 *)p = key_of(p, USE_STASH);
            s->stash[cls][n++] = p;
        }
        if (!n) return NULL;
        unsigned k = (unsigned)(next_random(s) % n);
        p = s->stash[cls][k];
        s->stash[cls][k] = s->stash[cls][--n];
        s->nstash[cls] = (uint8_t)n;
    }
    if (p) {
        hak_mark_clear(p);
        ((word64 *)p)[1] = 0;   /* the link's check word */
    }
    return p;
}

/* ---- quarantine -------------------------------------------------------- */

static inline size_t fill_end(size_t bs) {
    size_t end = bs - 16;   /* the size word and the next head guard stay */
    return end < HARD_FILL_MAX ? end : HARD_FILL_MAX;
}

static void poison(void *p, size_t bs) {
    word64 *w = p;
    uint64_t fill = key_of(NULL, USE_FILL);
    w[0] = key_of(p, USE_QUAR);
    for (size_t i = 1; i < fill_end(bs) / 8; i++) w[i] = fill;
}

static int still_poisoned(const void *p, size_t bs) {
    const word64 *w = p;
    uint64_t fill = key_of(NULL, USE_FILL);
    if (w[0] != key_of(p, USE_QUAR)) return 0;
    for (size_t i = 1; i < fill_end(bs) / 8; i++)
        if (w[i] != fill) return 0;
    return 1;
}

/* The oldest quarantined block leaves: to its heap if untouched; kept
 * out of use (lost) after a report. */
static void evict(struct hak_tls *t, struct hard_thread *s) {
    uintptr_t e = s->quar[s->quar_head];
    s->quar_head = (s->quar_head + 1) % HARD_QUAR_SLOTS;
    s->quar_count--;
    void *p = (void *)(e & (((uintptr_t)1 << 56) - 1));
    size_t bs = hak_class_size[e >> 56];
    s->quar_bytes -= bs;
    if (!still_poisoned(p, bs)) {
        hak_report_bad("free", p, HAK_REASON_WRITE_FREED);
        return;
    }
    to_heap(t, p);
}

static void release_small(struct hak_tls *t, void *p, unsigned cls) {
    struct hard_thread *s = self_of(t);
    size_t budget = (size_t)hak_opt(HAK_OPT_QUARANTINE_KB) << 10;
    size_t bs = hak_class_size[cls];
    if (!s || !budget) {
        to_heap(t, p);
        return;
    }
    poison(p, bs);
    s->quar[(s->quar_head + s->quar_count) % HARD_QUAR_SLOTS] = (uintptr_t)p | (uintptr_t)cls << 56;
    s->quar_count++;
    s->quar_bytes += bs;
    while (s->quar_count == HARD_QUAR_SLOTS || (s->quar_bytes > budget && s->quar_count > 1)) evict(t, s);
}

static void thread_exit(struct hak_tls *t) {
    struct hard_thread *s = hard_self;
    if (!s) return;
    while (s->quar_count) evict(t, s);
    for (unsigned c = 0; c < HAK_NCLASS; c++)
        for (unsigned k = 0; k < s->nstash[c]; k++) to_heap(t, s->stash[c][k]);
    hard_self = NULL;
    to_heap(t, s);
}

/* ---- the box ----------------------------------------------------------- */

static enum hak_ptr_kind hardened_classify(const void *p, struct hak_ptr_info *info) {
    enum hak_ptr_kind k = hak_classify_in_chunk(p, hak_chunk_entry(p), 1, info);
    if (k == HAK_PTR_SMALL) {
        uint64_t w = *(const word64 *)p;
        if (w == key_of(p, USE_QUAR)) {
            info->reason = HAK_REASON_DOUBLE;
            return HAK_PTR_INVALID;
        }
        if (w == key_of(p, USE_STASH)) {
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
};

const struct hak_safety_ops hak_safety_hardened = {
    .name = "hardened",
    .ss_entry_flag = HAK_SS_ENTRY_CHECKED,
    .classify = hardened_classify,
    .hardened = &hardened_ops,
};
