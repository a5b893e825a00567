/* Loaded with dlopen by fork-handlers.c (mode dlopen): a slow constructor
 * that registers fork handlers that allocate, while the dynamic linker
 * holds its lock (a fork by another thread meanwhile must not wait for
 * it). Registered after hakmem's, they run before its prepare and after
 * its parent and child handlers, so they can allocate; the counts tell
 * the program they ran. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

atomic_int fork_handlers_lib_prepares, fork_handlers_lib_parents, fork_handlers_lib_children;

static void allocate(void)
{
    static const size_t sizes[] = { 100, 5000, 4u << 20 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char *p = malloc(sizes[i]);
        if (!p)
            abort();
        memset(p, 0x5a, sizes[i]);
        free(p);
    }
}
static void prepare(void) { allocate(); atomic_fetch_add(&fork_handlers_lib_prepares, 1); }
static void parent(void) { allocate(); atomic_fetch_add(&fork_handlers_lib_parents, 1); }
static void child(void) { allocate(); atomic_fetch_add(&fork_handlers_lib_children, 1); }

__attribute__((constructor)) static void register_slowly(void)
{
    usleep(300000);
    if (pthread_atfork(prepare, parent, child))
        abort();
}
