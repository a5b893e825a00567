/* Blocks a thread frees into another heap's runs go to that heap's inbox:
 * a lock-free stack any thread pushes to with one CAS, which whoever holds
 * the heap's lock takes whole with one exchange (the drain).
 *
 * The inbox is a list of blocks linked through their first words, like
 * every free list, made of stretches: a stretch is blocks of one slab (so
 * of one run), and its first block carries in its chain word (the fourth
 * 32-bit word; the first two are the link, free mark included) how many
 * blocks the stretch has and where in the slab its last one is. The drain
 * gives each stretch to its run at once, reading its first block and its
 * last (whose link leads on), not every block in between: draining one
 * block at a time, the owner took a cache miss a block, one after the
 * other (a block's address came from the last one's link), on lines the
 * freeing core had just written; xmalloc 4 4 8000000 64 1024 spent 23-28%
 * of its time there. A walk of the inbox block by block
 * (hak_heap_holds_free) still sees an ordinary list. */
#include "backend/heap_int.h"

_Static_assert(HAK_SLAB_SIZE <= 65536 && HAK_SLAB_SIZE / 16 < 65536,
               "a stretch's last block offset and count fit 16 bits each");
#define SLAB_MASK ((uintptr_t)HAK_SLAB_SIZE - 1)

static inline uint32_t *chain_word(void *p) { return (uint32_t *)p + 3; }

/* Pushes first..last, whole stretches, onto owner's inbox: one CAS, any thread. */
static void remote_push(struct hak_heap *owner, void *first, void *last) {
    void *old = atomic_load_explicit(&owner->inbox, memory_order_relaxed);
    do {
        hak_list_set(last, old);
    } while (!atomic_compare_exchange_weak_explicit(&owner->inbox, &old, first,
                                                    memory_order_seq_cst, memory_order_relaxed));
}

/* 1 if owner had no thread when the blocks just pushed to its inbox got
 * there. The push and this load are sequentially consistent, as are
 * hak_heap_abandon's store of the flag and its drain's exchange: either
 * this load sees the flag, or that drain sees the push. (On x86 these are
 * the instructions a weaker order would use: no fence.) */
static int pushed_to_orphan(struct hak_heap *owner) {
    return atomic_load_explicit(&owner->orphaned, memory_order_seq_cst) != 0;
}

void hak_heap_free_remote(void *p) {
    hak_word_put(chain_word(p), 1u << 16 | (uint32_t)((uintptr_t)p & SLAB_MASK));
    remote_push(hak_ss_owner(hak_ss_of(p)), p, p);
}

/* ---- a flush's blocks for other heaps ---------------------------------- */

/* The open stretch becomes the chain's last one. */
static void stretch_close(struct hak_send_chain *c) {
    hak_word_put(chain_word(c->head), (uint32_t)c->n << 16 | (uint32_t)((uintptr_t)c->tail & SLAB_MASK));
    if (!c->first) c->first = c->head;
    else hak_list_set(c->last, c->head);
    c->last = c->tail;
    c->n = 0;
    c->slab = 0;
}

static void chain_send(struct hak_heap *h, struct hak_send_chain *c) {
    if (c->n) stretch_close(c);
    remote_push(c->owner, c->first, c->last);
    h->st.remote_pushes++;
    h->fed_orphans |= (uint8_t)pushed_to_orphan(c->owner);
    c->first = NULL;
}

void hak_send_add(struct hak_heap *h, struct hak_send *sd, void *p, uintptr_t slab, struct hak_heap *owner) {
    struct hak_send_chain *c = NULL;
    for (unsigned k = 0; k < sd->used; k++)
        if (sd->c[k].owner == owner) { c = &sd->c[k]; break; }
    if (!c) {
        if (sd->used < HAK_SEND_OWNERS) {
            c = &sd->c[sd->used++];
        } else {   /* a fifth owner: the oldest slot's chain goes now */
            c = &sd->c[sd->evict];
            sd->evict = (sd->evict + 1) % HAK_SEND_OWNERS;
            chain_send(h, c);
        }
        *c = (struct hak_send_chain){ .owner = owner };
    } else if (c->n && c->slab == slab) {
        hak_send_prepend(sd, c, p);
        return;
    } else if (c->n) {
        stretch_close(c);
    }
    hak_list_set(p, NULL);
    c->head = c->tail = p;
    c->slab = slab;
    c->n = 1;
    sd->last = c;
}

void hak_send_all(struct hak_heap *h, struct hak_send *sd) {
    for (unsigned k = 0; k < sd->used; k++)
        if (sd->c[k].n || sd->c[k].first) chain_send(h, &sd->c[k]);
}

/* ---- the owner's side --------------------------------------------------- */

void hak_heap_drain_inbox(struct hak_heap *h, int keep_empty) {
    void *p = atomic_exchange_explicit(&h->inbox, NULL, memory_order_seq_cst);   /* see pushed_to_orphan */
    if (!p) return;
    h->st.inbox_drains++;
    uint64_t classes[(HAK_NCLASS + 63) / 64] = { 0 };
    while (p) {
        uint32_t w = hak_word_get(chain_word(p));
        unsigned n = w >> 16;
        void *last = (void *)(((uintptr_t)p & ~SLAB_MASK) | (w & SLAB_MASK));
        void *next = hak_list_get(last);
        __builtin_prefetch(next);   /* its line is the next miss: overlap it with this stretch's work */
        struct hak_superslab *ss = hak_ss_of(p);
        struct hak_heap *owner = hak_ss_owner(ss);
        if (HAK_LIKELY(owner == h)) {
            struct hak_slab *s = hak_slab_of(ss, p);
            unsigned cls = s->cls;
            classes[cls / 64] |= (uint64_t)1 << (cls % 64);
            hak_run_put_noting(h, ss, s, p, last, n, keep_empty, hak_class_size[cls]);
        } else {
            remote_push(owner, p, last);   /* its SuperSlab moved to another heap (ss_move) */
        }
        h->st.inbox_blocks += n;
        p = next;
    }
    for (unsigned w = 0; w < (HAK_NCLASS + 63) / 64; w++)
        if (classes[w]) atomic_fetch_or_explicit(&h->lendable[w], classes[w], memory_order_relaxed);
}

int hak_heap_holds_free(struct hak_heap *h, const void *p) {
    struct hak_superslab *ss = hak_ss_of(p);
    int found = 0;
    hak_spin_lock(&h->lock);
    if (hak_ss_owner(ss) == h) {
        struct hak_slab *s = hak_slab_of(ss, p);
        uint32_t n = 0;
        for (void *q = s->free; q && n < s->nfree && !found; q = hak_list_get(q), n++)
            found = q == p;
        if (s->nhollow && hak_slab_holds_hollow(s, p)) found = 1;
    }
    /* blocks other threads sent back: pushers only add at the head, and
     * whoever unlinks them (a drain, the owner's or a borrower's) holds
     * the lock, so the walk stays on blocks that are still in there */
    unsigned n = 0;
    for (void *q = atomic_load_explicit(&h->inbox, memory_order_acquire); q && n < 65536 && !found;
         q = hak_list_get(q), n++)
        found = q == p;
    hak_spin_unlock(&h->lock);
    return found;
}
