/* fork(): hakmem's handlers hold every global lock across it, so a child
 * never inherits a lock taken by a thread that does not exist there.
 *
 * They are registered with pthread_atfork once the process becomes
 * multi-threaded, not at init: in a process with one thread no other
 * thread can hold a lock at fork, and the call alone maps the pages of
 * libc it runs (64 KiB fault-around windows nothing else touches, about
 * 130 KB of a small program's peak RSS). glibc clears
 * __libc_single_threaded at the start of the first pthread_create, before
 * it allocates the new thread's DTV with calloc: hak_calloc's check
 * registers there, on the creating thread, before the second thread
 * exists; the set-up of a second thread in hakmem registers them if that
 * did not. Only calloc reads __libc_single_threaded: the first read maps
 * libc's data pages around it, as large a cost as the call.
 *
 * Other libraries' handlers are then usually registered before hakmem's,
 * and libc runs prepare handlers in the reverse order of registration:
 * theirs run after hakmem's holds every lock, and may allocate. The locks
 * the prepare takes hold 2 (base/common.h) and the forking thread is
 * their owner (hak_os_fork_own) until the parent or child handler
 * releases them: its allocations pass them, any other thread waits. */
#ifndef HAK_FORK_H
#define HAK_FORK_H

#include "base/common.h"

#include <stdatomic.h>

/* 1 once nothing is left to do: the handlers are registered, or failed to
 * be. */
HAK_DATA _Atomic unsigned char hak_fork_armed;
/* Registers the handlers if the process has more than one thread (waits
 * while another thread registers them). The caller holds no hakmem lock:
 * pthread_atfork may allocate (libc's list of handlers grows past its
 * inline room). */
void hak_fork_arm(void);
/* The second thread hakmem sets up registers them if calloc did not
 * (a thread set-up holds no lock). */
void hak_fork_thread_setup(void);
/* Called as hak_* (-Dinterpose=false), hakmem is not the calloc of
 * pthread_create, and a thread may take its locks with no thread set-up
 * (the large path): its slow paths check, holding no lock, once a thread. */
#if HAKMEM_INTERPOSE
#define hak_fork_check_thread() ((void)0)
#else
#define hak_fork_check_thread()                                                              \
    do {                                                                                     \
        if (!atomic_load_explicit(&hak_fork_armed, memory_order_relaxed)) hak_fork_thread_setup(); \
    } while (0)
#endif
/* calloc's check: a load and a branch once armed. */
static inline void hak_fork_check(void) {
    if (HAK_UNLIKELY(!atomic_load_explicit(&hak_fork_armed, memory_order_relaxed))) hak_fork_arm();
}
/* Where the registration stands (stats and tests). */
enum {
    HAK_FORK_NOT_NEEDED = 0,   /* one thread so far */
    HAK_FORK_REGISTERED = 1,
    HAK_FORK_FAILED = 2,
    HAK_FORK_REGISTERING = 3,
};
int hak_fork_handlers_state(void);

#endif
