/* Fork handlers registered at init (builds that do not interpose the
 * malloc API, -Dinterpose=false: hakmem is then a library its program
 * calls, and registers like one). */
#include "api/fork.h"

#include <pthread.h>

void hak_fork_at_init(void) {
    hak_fork_handlers_register();
}

/* pthread_atfork passes this library's own __dso_handle, as the dso
 * argument would. */
static int register_with_pthread_atfork(void (*prepare)(void), void (*parent)(void),
                                        void (*child)(void), void *dso) {
    (void)dso;
    return pthread_atfork(prepare, parent, child);
}

hak_register_atfork_fn hak_fork_register_fn(void) {
    return register_with_pthread_atfork;
}
