/* Preloaded after libhakmem.so by init-failures.sh: the two calls hakmem
 * makes into the thread library fail, as they do in a process out of
 * thread-specific keys or out of memory. hakmem's pthread_atfork (linked
 * into it from libc_nonshared.a) calls __register_atfork, this one's,
 * which comes before libc's and fails. Every pthread_key_create made
 * through the dynamic linker fails. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

/* One key is made for real, before any failure: with nothing else making
 * keys it is key 0, the value of a key variable nobody set. hakmem once
 * wrote its heap into that key after its own creation failed;
 * init-failures.c checks that this key's values stay NULL. */
pthread_key_t init_shim_key;
int init_shim_key_made;

__attribute__((constructor)) static void make_real_key(void)
{
    int (*real)(pthread_key_t *, void (*)(void *)) =
        (int (*)(pthread_key_t *, void (*)(void *)))dlsym(RTLD_NEXT, "pthread_key_create");
    init_shim_key_made = real && real(&init_shim_key, NULL) == 0;
}

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
