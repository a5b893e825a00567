/* fork(): hakmem's handlers hold every global lock across it, so a child
 * never inherits a lock taken by a thread that does not exist there.
 *
 * They are registered with pthread_atfork at init (from hakmem's
 * constructor, or from the first malloc if that comes first), like any
 * library's. libc runs prepare handlers in the reverse order of
 * registration and the others in order: hakmem's prepare must come after
 * every other library's, whose prepare handlers may allocate, so it must
 * be registered before theirs. A preloaded hakmem's constructor runs
 * before the program's and before those of the libraries loaded later
 * (dlopen); the libraries the program links are initialised before it
 * (LD_DEBUG=files shows the order), and one of them that registers
 * handlers in its constructor before anything has allocated comes first
 * in the list: if its prepare handler allocates, the fork hangs. */
#ifndef HAK_FORK_H
#define HAK_FORK_H

#include "base/common.h"

/* Called once, by the thread that initialised the allocator, once the
 * allocator works: pthread_atfork may allocate (libc's list of handlers
 * grows past its inline room). No hakmem lock may be held. */
void hak_fork_at_init(void);
/* Where the registration stands (stats and tests). */
enum { HAK_FORK_NOT_YET = 0, HAK_FORK_REGISTERED = 1, HAK_FORK_FAILED = 2 };
int hak_fork_handlers_state(void);

#endif
