/* The spin lock's contended path and its wait counts, one set per kind of
 * lock (base/common.h). The waiting itself is the os layer's
 * (hak_os_lock_wait: spin a while, then yield), shared with its own lock. */
#include "base/common.h"
#include "os/os.h"

static struct hak_lock_waits counts[HAK_LOCK_NKINDS];

void hak_spin_lock_slow(hak_spinlock_t *l) {
    unsigned k = l->kind < HAK_LOCK_NKINDS ? l->kind : HAK_LOCK_OTHER;
    hak_os_lock_wait(&l->v, 1, &counts[k]);
}

void hak_spin_fork_take(hak_spinlock_t *l) {
    int free_ = 0;
    if (atomic_compare_exchange_strong_explicit(&l->v, &free_, HAK_LOCK_FORK, memory_order_acquire,
                                                memory_order_relaxed))
        return;
    unsigned k = l->kind < HAK_LOCK_NKINDS ? l->kind : HAK_LOCK_OTHER;
    hak_os_lock_wait(&l->v, HAK_LOCK_FORK, &counts[k]);
}

void hak_spin_lock_waits(struct hak_lock_waits *out) {
    for (unsigned k = 0; k < HAK_LOCK_NKINDS; k++)
        out[k] = (struct hak_lock_waits){
            .waits = __atomic_load_n(&counts[k].waits, __ATOMIC_RELAXED),
            .spins = __atomic_load_n(&counts[k].spins, __ATOMIC_RELAXED),
            .yields = __atomic_load_n(&counts[k].yields, __ATOMIC_RELAXED),
            .wait_ns = __atomic_load_n(&counts[k].wait_ns, __ATOMIC_RELAXED),
            .max_wait_ns = __atomic_load_n(&counts[k].max_wait_ns, __ATOMIC_RELAXED),
        };
}
