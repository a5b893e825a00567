/* A heap's owner changes with threads: a thread that starts adopts an
 * exited thread's heap (or makes one), and a thread that exits abandons
 * its heap to the queue of orphans (heap_orphans.c). */
#include "backend/heap_int.h"
#include "os/os.h"

static struct hak_heap *acquire_one(void) {
    struct hak_heap *h = hak_heap_abandoned_take();
    if (h) {
        /* no recent high yet (see keep_for_recent_high) */
        hak_spin_lock(&h->lock);
        atomic_store_explicit(&h->orphaned, 0, memory_order_relaxed);
        h->scavenged = 0;
        h->high_now = h->high_last = 0;
        h->high_since = hak_os_clock_ms();
        h->dropped_bytes = 0;   /* the exited thread's fall says nothing either */
        hak_spin_unlock(&h->lock);
        return h;
    }
    return hak_heap_new();
}

/* Threads that own a heap now: hak_heaps_owned (heap.h). */
static _Atomic unsigned owned;

unsigned hak_heaps_owned(void) { return atomic_load_explicit(&owned, memory_order_relaxed); }

void hak_heaps_owned_fork_child(int has_heap) {
    atomic_store_explicit(&owned, has_heap ? 1u : 0u, memory_order_relaxed);
}

struct hak_heap *hak_heap_acquire(void) {
    struct hak_heap *h = acquire_one();
    if (h) atomic_fetch_add_explicit(&owned, 1, memory_order_relaxed);
    return h;
}

/* The heap keeps its current runs, emptied or not, with their free blocks
 * already carved: the thread that adopts it next (often one just like the
 * one that exited) allocates from the same pages instead of carving new
 * runs elsewhere. Releasing them here made every short-lived thread place
 * and touch fresh runs (docs/PERFORMANCE.md, "Remote frees and idle
 * heaps"). Runs nobody adopts are released after a decay period
 * (scavenge_one). */
void hak_heap_abandon(struct hak_heap *h) {
    atomic_fetch_sub_explicit(&owned, 1, memory_order_relaxed);
    hak_spin_lock(&h->lock);
    /* orphaned before the last drain: a thread pushing to the inbox from
     * now on either is drained here or sees the flag (pushed_to_orphan in
     * heap_remote.c) and scavenges later */
    atomic_store_explicit(&h->orphaned, 1, memory_order_seq_cst);
    hak_heap_drain_inbox(h, 0);
    hak_heap_decay(h);
    hak_heap_trim(h);
    h->abandoned_ms = hak_os_clock_ms();
    h->scavenged = 0;   /* warm: the next thread to start adopts it */
    int fed = h->fed_orphans;
    h->fed_orphans = 0;
    hak_spin_unlock(&h->lock);
    hak_heap_abandoned_add(h);
    /* blocks this thread sent to heaps nobody owns: nobody else may come
     * for them (an idle process keeps them resident until exit) */
    if (fed) hak_heap_scavenge_abandoned();
}

