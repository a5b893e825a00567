#include "core/fork.h"
#include "core/options.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "backend/os.h"
#include "backend/superslab.h"

static void fork_prepare(void) {
    hak_heap_fork_prepare();
    hak_ss_fork_prepare();
    hak_large_fork_prepare();
    hak_os_fork_prepare();
}
static void fork_parent(void) {
    hak_os_fork_parent();
    hak_large_fork_parent();
    hak_ss_fork_parent();
    hak_heap_fork_parent();
}
static void fork_child(void) {
    hak_os_fork_child();
    hak_large_fork_child();
    hak_ss_fork_child();
    hak_heap_fork_child();
}

extern void *__dso_handle;

static hak_spinlock_t register_lock = HAK_SPINLOCK_INIT;
static atomic_int registered;   /* HAK_FORK_* below */

/* The lock makes a second caller wait until the first has registered:
 * a thread must not fork, nor let another library register, before
 * hakmem's handlers are in the list. libc's own lock is taken inside, and
 * nobody takes this one while holding libc's, so the two cannot deadlock;
 * the allocations libc makes meanwhile take no hakmem lock held here. */
void hak_fork_handlers_register(void) {
    if (atomic_load_explicit(&registered, memory_order_acquire)) return;
    hak_spin_lock(&register_lock);
    if (!atomic_load_explicit(&registered, memory_order_relaxed)) {
        int failed = hak_fork_register_next(fork_prepare, fork_parent, fork_child, &__dso_handle);
        if (failed)
            hak_log("hakmem: warning: pthread_atfork failed: a child forked while another thread "
                    "is in the allocator may hang\n");
        /* a failure too is final: one warning, not one on every fork */
        atomic_store_explicit(&registered, failed ? HAK_FORK_FAILED : HAK_FORK_REGISTERED,
                              memory_order_release);
    }
    hak_spin_unlock(&register_lock);
}

int hak_fork_handlers_state(void) {
    return atomic_load_explicit(&registered, memory_order_acquire);
}
