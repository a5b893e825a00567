#include "api/fork.h"
#include "base/options.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "os/os.h"
#include "backend/superslab.h"

extern void *__dso_handle;   /* this object's, as pthread_atfork passes it */

static hak_spinlock_t register_lock = HAK_SPINLOCK_INIT;
static atomic_int registered;   /* HAK_FORK_* */

/* One fork at a time through the handlers. glibc 2.36 runs the handlers of
 * forks from several threads at once, and two prepares taking the heaps'
 * locks at once can each hold what the other waits for (a heap added
 * between one's passes is the other's first); they also share
 * fork_heaps (backend/heap_create.c). Taken first, released last. */
static hak_spinlock_t fork_lock = HAK_SPINLOCK_INIT;

static void fork_prepare(void) {
    hak_spin_lock(&fork_lock);
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
    hak_spin_unlock(&fork_lock);
}
static void fork_child(void) {
    hak_os_fork_child();
    hak_large_fork_child();
    hak_ss_fork_child();
    hak_heap_fork_child();
    /* This handler running proves the registration done, even if the
     * fork (one that bypassed hakmem's wrappers) landed while the
     * registering thread, absent here, still held its lock. */
    atomic_store_explicit(&registered, HAK_FORK_REGISTERED, memory_order_relaxed);
    hak_spin_unlock(&register_lock);
    hak_spin_unlock(&fork_lock);
}

/* The lock makes a second caller wait until the first has registered: a
 * thread must not fork, nor let another library register, before
 * hakmem's handlers are in the list. The registration function is found
 * before the lock is taken: finding it may take the dynamic linker's
 * lock, which a dlopen holds while its constructors run, and one that
 * registers handlers then waits for this lock. libc's handler lock is
 * taken inside, but never held by anyone waiting for this one; the
 * allocations libc makes meanwhile take no hakmem lock held here. */
void hak_fork_handlers_register(void) {
    if (atomic_load_explicit(&registered, memory_order_acquire)) return;
    hak_register_atfork_fn reg = hak_fork_register_fn();
    hak_spin_lock(&register_lock);
    if (!atomic_load_explicit(&registered, memory_order_relaxed)) {
        int failed = reg(fork_prepare, fork_parent, fork_child, __dso_handle);
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
