#include "api/fork.h"
#include "api/init.h"
#include "base/options.h"
#include "base/track.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "os/os.h"
#include "safety/safety.h"
#include "backend/superslab.h"
#include "backend/transfer.h"

#include <pthread.h>
#include <sys/single_threaded.h>

#ifdef __GLIBC__
/* What glibc's pthread_atfork, a stub in libc_nonshared.a, calls. Called
 * here directly: the stub would be linked after every object, at the end
 * of .text among the code most programs never run (src/meson.build,
 * hakmem_objects), and map that 64 KiB window in every threaded program. */
extern void *__dso_handle __attribute__((weak, visibility("hidden")));
int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso);
#define hak_atfork(prepare, parent, child) __register_atfork(prepare, parent, child, __dso_handle)
#else
#define hak_atfork(prepare, parent, child) pthread_atfork(prepare, parent, child)
#endif

static atomic_int registered;   /* HAK_FORK_* */
_Atomic unsigned char hak_fork_armed;
/* Set on the registering thread: its own allocations inside
 * pthread_atfork go on instead of waiting for itself. */
static __thread char registering __attribute__((tls_model("initial-exec")));

/* One fork at a time through the handlers. glibc 2.36 runs the handlers of
 * forks from several threads at once, and two prepares taking the heaps'
 * locks at once can each hold what the other waits for (a heap added
 * between one's passes is the other's first); they also share
 * fork_heaps (backend/heap_create.c). Taken first, released last. */
static hak_spinlock_t fork_lock = HAK_SPINLOCK_INIT;

static void fork_prepare(void) {
    hak_spin_lock(&fork_lock);
    hak_heap_fork_prepare();
    hak_xfer_fork_prepare();
    hak_ss_fork_prepare();
    hak_large_fork_prepare();
    hak_os_fork_prepare();
    hak_track_fork_prepare();
    hak_os_fork_own(1);
}
static void fork_parent(void) {
    hak_os_fork_own(0);
    hak_track_fork_release();
    hak_os_fork_parent();
    hak_large_fork_parent();
    hak_ss_fork_parent();
    hak_xfer_fork_parent();
    hak_heap_fork_parent();
    hak_spin_unlock(&fork_lock);
}
static void fork_child(void) {
    hak_os_fork_own(0);
    hak_track_fork_release();
    hak_os_fork_child();
    hak_large_fork_child();
    hak_ss_fork_child();
    hak_xfer_fork_child();
    hak_heap_fork_child();
    hak_heaps_owned_fork_child(hak_tls.heap != NULL);
    if (hak_safety && hak_safety->hardened) hak_safety->hardened->fork_child();
    /* This handler running proves the registration done, even if the
     * fork landed before the registering thread, absent here, said so. */
    atomic_store_explicit(&registered, HAK_FORK_REGISTERED, memory_order_relaxed);
    atomic_store_explicit(&hak_fork_armed, 1, memory_order_relaxed);
    hak_spin_unlock(&fork_lock);
}

/* libc's __register_atfork takes its own lock only, no dynamic linker's,
 * so this is safe from a calloc that pthread_create or the dynamic linker
 * makes. Threads that come here while another registers wait for it: they
 * hold no lock, and must not fork before the handlers are in libc's list. */
static void register_handlers(void) {
    hak_init();   /* the handlers use the boxes chosen at init */
    int state = HAK_FORK_NOT_NEEDED;
    if (!atomic_compare_exchange_strong_explicit(&registered, &state, HAK_FORK_REGISTERING,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        while (atomic_load_explicit(&registered, memory_order_acquire) == HAK_FORK_REGISTERING)
            hak_os_yield();
        return;
    }
    registering = 1;
    int failed = hak_atfork(fork_prepare, fork_parent, fork_child);
    registering = 0;
    if (failed)
        hak_log("hakmem: warning: pthread_atfork failed: a child forked while another thread "
                "is in the allocator may hang\n");
    /* the child handler may have stored REGISTERED meanwhile: same value */
    atomic_store_explicit(&registered, failed ? HAK_FORK_FAILED : HAK_FORK_REGISTERED,
                          memory_order_release);
    atomic_store_explicit(&hak_fork_armed, 1, memory_order_release);
}

/* Reading __libc_single_threaded maps libc's data page around it (about
 * as much as pthread_atfork's text): only calloc, where pthread_create
 * comes first, reads it. */
HAK_COLD void hak_fork_arm(void) {
    if (__libc_single_threaded || registering) return;
    register_handlers();
}

HAK_COLD void hak_fork_thread_setup(void) {
    if (registering || atomic_load_explicit(&hak_fork_armed, memory_order_acquire)) return;
#if HAKMEM_INTERPOSE
    /* the calloc of pthread_create armed it already; the first thread set
     * up is the one that started the process */
    static atomic_uint setups;
    if (atomic_fetch_add_explicit(&setups, 1, memory_order_relaxed) == 0) return;
#else
    /* called as hak_*, hakmem is not the calloc of pthread_create, and the
     * first thread it sees may be any: only the process's first one is
     * sure to have been alone (asked once a thread: a system call) */
    static __thread char checked __attribute__((tls_model("initial-exec")));
    if (checked) return;
    checked = 1;
    if (hak_os_is_initial_thread()) return;
#endif
    register_handlers();
}

int hak_fork_handlers_state(void) {
    return atomic_load_explicit(&registered, memory_order_acquire);
}
