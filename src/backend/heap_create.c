/* The registry of every heap (and the queue of abandoned ones, kept by
 * heap_orphans.c), a new heap, and what walks all of them: stats and
 * fork. */
#include "backend/heap_int.h"
#include "os/os.h"

#include <string.h>

struct hak_heap_registry hak_heaps = { .lock = HAK_SPINLOCK_INIT_KIND(HAK_LOCK_HEAP_LIST) };

struct hak_heap *hak_heap_new(void) {
    struct hak_heap *h = hak_os_meta_alloc(sizeof *h);
    if (!h) return NULL;
    memset(h, 0, sizeof *h);
    h->lock.kind = HAK_LOCK_HEAP;
    /* the clock's stamps start now: a stamp of 0 reads as the future for
     * the half of its 49.7-day cycle past 2^31 ms, and a heap whose first
     * tick waits for that time never ticks */
    uint32_t now = hak_os_clock_ms();
    h->decay_at = h->high_since = now;
    atomic_store_explicit(&h->active_ms, now, memory_order_relaxed);
    hak_spin_lock(&hak_heaps.lock);
    h->next_all = hak_heaps.all;
    __atomic_store_n(&hak_heaps.all, h, __ATOMIC_RELEASE);   /* borrowers read it unlocked */
    hak_spin_unlock(&hak_heaps.lock);
    return h;
}

/* Blocks of h's runs not on a run free list, and their bytes (h's lock
 * held). */
static size_t out_of_runs(const struct hak_heap *h, size_t *blocks) {
    size_t bytes = 0, n = 0;
    for (const struct hak_superslab *ss = h->ss_list; ss; ss = ss->next)
        for (unsigned i = 1; i < HAK_SLABS_PER_SS; i++) {
            const struct hak_slab *s = &ss->slabs[i];
            if (s->state != HAK_SLAB_FREE && s->state != HAK_SLAB_TAIL) {
                n += s->used;
                bytes += (size_t)s->used * s->block_size;
            }
        }
    *blocks = n;
    return bytes;
}

size_t hak_heap_bytes_out(struct hak_heap *h) {
    size_t blocks;
    hak_spin_lock(&h->lock);
    size_t bytes = out_of_runs(h, &blocks);
    hak_spin_unlock(&h->lock);
    return bytes;
}

void hak_heap_snapshot(struct hak_heap *h, struct hak_heap_stats *st, struct hak_heap_usage *u) {
    hak_spin_lock(&h->lock);
    *st = h->st;
    u->bytes_out = out_of_runs(h, &u->blocks_out);
    u->superslabs = h->ss_count;
    u->orphaned = atomic_load_explicit(&h->orphaned, memory_order_relaxed) != 0;
    hak_spin_unlock(&h->lock);
}

void hak_heap_foreach(void (*fn)(struct hak_heap *, void *), void *arg) {
    hak_spin_lock(&hak_heaps.lock);
    struct hak_heap *h = hak_heaps.all;
    hak_spin_unlock(&hak_heaps.lock);
    for (; h; h = h->next_all) fn(h, arg);
}

/* fork(): every heap's lock, then the list's, so that the child inherits
 * no heap in the middle of a change (it may borrow from or adopt those of
 * threads that do not exist there), and no heap whose lock nobody will
 * ever release: a child that forks in turn takes them all again. Heap
 * locks come first, since their holders may take hak_heaps.lock; heaps
 * are only ever added at the list's head, so a pass that finds the head
 * unchanged once it holds the list's lock has them all. */
static struct hak_heap *fork_heaps;   /* the list as it was when locked */
void hak_heap_fork_prepare(void) {
    struct hak_heap *done = NULL;   /* heaps from here on are locked */
    for (;;) {
        hak_spin_fork_take(&hak_heaps.lock);
        struct hak_heap *head = hak_heaps.all;
        if (head == done) break;   /* holding the list's lock */
        hak_spin_fork_release(&hak_heaps.lock);
        for (struct hak_heap *h = head; h != done; h = h->next_all) hak_spin_fork_take(&h->lock);
        done = head;
    }
    fork_heaps = done;
}
static void fork_unlock_all(void) {
    hak_spin_fork_release(&hak_heaps.lock);
    for (struct hak_heap *h = fork_heaps; h; h = h->next_all) hak_spin_fork_release(&h->lock);
}
void hak_heap_fork_parent(void) { fork_unlock_all(); }
void hak_heap_fork_child(void) { fork_unlock_all(); }
