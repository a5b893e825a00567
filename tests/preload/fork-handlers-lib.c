/* Loaded with dlopen by fork-handlers.c (mode dlopen): a slow constructor
 * that registers fork handlers. The dynamic linker holds its lock while
 * constructors run; the registration goes through hakmem, which must not
 * then wait on a thread that waits for that lock. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static void allocate(void)
{
    free(malloc(100));
}

__attribute__((constructor)) static void register_slowly(void)
{
    usleep(300000);
    if (pthread_atfork(allocate, allocate, allocate))
        abort();
}
