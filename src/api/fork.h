/* fork(): hakmem's handlers hold every global lock across it, so a child
 * never inherits a lock taken by a thread that does not exist there.
 *
 * When they are registered is a choice of the build (src/meson.build):
 * - api/fork_at_init.c (-Dinterpose=false): at init, like any library.
 * - api/fork_interpose.c (the default): not before the process needs
 *   them, which is before its first fork (fork, __fork, daemon, forkpty) or
 *   before any other code registers fork handlers, whichever comes first. A
 *   process that does neither never calls into that part of libc: its
 *   code and data cost a single-threaded program 116-128 KB of resident
 *   libc pages (docs/PERFORMANCE.md, session 25).
 * Either way hakmem's handlers are the first registered, so its prepare
 * runs after every other library's (whose prepare handlers may allocate)
 * and its child and parent handlers before theirs. */
#ifndef HAK_FORK_H
#define HAK_FORK_H

#include "base/common.h"

/* Registers the handlers once; every later call returns at once. Safe
 * from any thread; may allocate (libc's list of handlers grows). */
void hak_fork_handlers_register(void);
/* Where the registration stands (stats and tests). */
enum { HAK_FORK_NOT_YET = 0, HAK_FORK_REGISTERED = 1, HAK_FORK_FAILED = 2 };
int hak_fork_handlers_state(void);
/* Called by init once the allocator works: registers, or not (above). */
void hak_fork_at_init(void);
/* The registration itself, per build: libc's __register_atfork, reached
 * past hakmem's own when hakmem interposes it. Found on the first call
 * (which may take the dynamic linker's lock: no hakmem lock may be held). */
typedef int (*hak_register_atfork_fn)(void (*prepare)(void), void (*parent)(void),
                                      void (*child)(void), void *dso);
hak_register_atfork_fn hak_fork_register_fn(void);

#endif
