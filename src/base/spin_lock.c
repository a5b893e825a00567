/* The spin lock's contended path (base/common.h): spin on a read a while,
 * then let other threads run. Never sleeps in the kernel. */
#include "base/common.h"
#include "os/os.h"

void hak_spin_lock_slow(hak_spinlock_t *l) {
    for (unsigned spins = 0;; spins++) {
        while (atomic_load_explicit(&l->v, memory_order_relaxed)) {
            if (spins++ < 64) __builtin_ia32_pause();
            else hak_os_yield();
        }
        if (atomic_exchange_explicit(&l->v, 1, memory_order_acquire) == 0)
            return;
    }
}
