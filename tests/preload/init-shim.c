/* Preloaded ahead of libhakmem.so by init-failures.sh: the two calls
 * hakmem's init makes into the thread library fail, as they do in a
 * process out of thread-specific keys or out of memory. pthread_atfork
 * itself is linked into each library from libc_nonshared.a, so the call
 * to fail is the one it makes, __register_atfork. */
#include <errno.h>
#include <pthread.h>

int pthread_key_create(pthread_key_t *key, void (*destructor)(void *))
{
    (void)key;
    (void)destructor;
    return EAGAIN;
}

int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso);
int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso)
{
    (void)prepare;
    (void)parent;
    (void)child;
    (void)dso;
    return ENOMEM;
}
