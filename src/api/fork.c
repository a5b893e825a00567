#include "api/fork.h"
#include "base/options.h"
#include "base/track.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "os/os.h"
#include "backend/superslab.h"

#include <pthread.h>

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
    hak_track_fork_prepare();
}
static void fork_parent(void) {
    hak_track_fork_release();
    hak_os_fork_parent();
    hak_large_fork_parent();
    hak_ss_fork_parent();
    hak_heap_fork_parent();
    hak_spin_unlock(&fork_lock);
}
static void fork_child(void) {
    hak_track_fork_release();
    hak_os_fork_child();
    hak_large_fork_child();
    hak_ss_fork_child();
    hak_heap_fork_child();
    /* This handler running proves the registration done, even if the
     * fork landed before the registering thread, absent here, said so. */
    atomic_store_explicit(&registered, HAK_FORK_REGISTERED, memory_order_relaxed);
    hak_spin_unlock(&fork_lock);
}

/* libc's __register_atfork takes its own lock only, no dynamic linker's,
 * so this is safe from a constructor and from a malloc that the dynamic
 * linker makes; an allocation it makes is served (init is done). */
void hak_fork_at_init(void) {
    int failed = pthread_atfork(fork_prepare, fork_parent, fork_child);
    if (failed)
        hak_log("hakmem: warning: pthread_atfork failed: a child forked while another thread "
                "is in the allocator may hang\n");
    atomic_store_explicit(&registered, failed ? HAK_FORK_FAILED : HAK_FORK_REGISTERED,
                          memory_order_release);
}

int hak_fork_handlers_state(void) {
    return atomic_load_explicit(&registered, memory_order_acquire);
}
