/* Fork handlers registered when first needed (see api/fork.h): hakmem
 * stands in front of the calls that fork or register fork handlers,
 * registers its own first, then passes the call on to the next library
 * that has it (libc, or another interposer loaded after hakmem). */
#define _GNU_SOURCE
#include "api/fork.h"
#include "base/options.h"

#include <dlfcn.h>
#include <pty.h>
#include <stdlib.h>
#include <unistd.h>

void hak_fork_at_init(void) {}

/* dlsym may allocate: these run only on calls that are rare and come
 * with the allocator set up. A missing symbol would mean a libc without
 * it, where the program could not have linked to hakmem's either. */
static void *next_symbol(void **cache, const char *name) {
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        if (!f) {
            hak_log("hakmem: fatal: no %s after hakmem's own\n", name);
            abort();
        }
        __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    }
    return f;
}
#define NEXT(type, name) ({ static void *cache; (type)next_symbol(&cache, name); })

hak_register_atfork_fn hak_fork_register_fn(void) {
    return NEXT(hak_register_atfork_fn, "__register_atfork");
}

/* What pthread_atfork calls: since glibc 2.3.2 it is linked into each
 * program and library (from libc_nonshared.a), with that object's
 * __dso_handle, and reaches libc through here. (Binaries built against
 * an older glibc import pthread_atfork itself, which libc keeps for them
 * and which reaches libc's __register_atfork directly: their handlers
 * come before hakmem's, and one that allocates in its prepare handler
 * would hang the fork.) */
int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                      void *dso);
HAK_EXPORT int __register_atfork(void (*prepare)(void), void (*parent)(void),
                                 void (*child)(void), void *dso) {
    hak_fork_handlers_register();
    return hak_fork_register_fn()(prepare, parent, child, dso);
}

HAK_EXPORT pid_t fork(void) {
    hak_fork_handlers_register();
    return NEXT(pid_t (*)(void), "fork")();
}

/* libc exports fork's body under this name too */
pid_t __fork(void);
HAK_EXPORT pid_t __fork(void) {
    hak_fork_handlers_register();
    return NEXT(pid_t (*)(void), "__fork")();
}

/* daemon and forkpty fork inside libc, past the fork above. */
HAK_EXPORT int daemon(int nochdir, int noclose) {
    hak_fork_handlers_register();
    return NEXT(int (*)(int, int), "daemon")(nochdir, noclose);
}

HAK_EXPORT pid_t forkpty(int *amaster, char *name, const struct termios *termp, const struct winsize *winp) {
    hak_fork_handlers_register();
    return NEXT(pid_t (*)(int *, char *, const struct termios *, const struct winsize *),
                "forkpty")(amaster, name, termp, winp);
}
