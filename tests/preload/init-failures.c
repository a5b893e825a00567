/* What init-failures.sh runs: threads that allocate, free and exit one
 * after the other, each freeing some of its predecessor's blocks, then a
 * fork. Without a thread key hakmem cannot hand an exited thread's heap
 * on, and without fork handlers the child relies on the parent being
 * single-threaded when it forks (it is, here); the blocks must still be
 * intact throughout, and the key the shim made for real (key 0, which
 * hakmem's unset key variable also holds) must keep its NULL values in
 * every thread. Prints "ok" and exits 0 when every check holds. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { THREADS = 16, BLOCKS = 2000 };
static unsigned char *kept[BLOCKS];

static size_t size_of(size_t i) { return 16 + (i * 37) % 3000; }
static pthread_key_t shim_key;

static void die(const char *what)
{
    fprintf(stderr, "init-failures: %s\n", what);
    exit(1);
}

static void *work(void *arg)
{
    unsigned char tag = (unsigned char)(uintptr_t)arg;
    for (size_t i = 0; i < BLOCKS; i++) {
        if (kept[i]) {   /* the previous thread's block, still as it left it */
            for (size_t k = 0; k < size_of(i); k++)
                if (kept[i][k] != (unsigned char)(tag - 1))
                    die("a block changed after its thread exited");
            free(kept[i]);
        }
        void *scratch = malloc(size_of(i + 1));
        if (!scratch || !(kept[i] = malloc(size_of(i))))
            die("malloc failed");
        memset(kept[i], tag, size_of(i));
        free(scratch);
    }
    if (pthread_getspecific(shim_key))
        die("the shim's key got a value in a thread");
    return NULL;
}

int main(void)
{
    const pthread_key_t *key = dlsym(RTLD_DEFAULT, "init_shim_key");
    const int *made = dlsym(RTLD_DEFAULT, "init_shim_key_made");
    if (!key || !made || !*made)
        die("init-shim.so is not preloaded, or could not make its key");
    if (*key != 0)
        die("the shim's key is not key 0: this program cannot see a stray pthread_setspecific");
    shim_key = *key;
    free(malloc(100));   /* hakmem sets this thread up */
    if (pthread_getspecific(shim_key))
        die("the shim's key got a value in the main thread");
    for (uintptr_t t = 1; t <= THREADS; t++) {
        pthread_t th;
        if (pthread_create(&th, NULL, work, (void *)t) || pthread_join(th, NULL))
            die("pthread_create or pthread_join failed");
    }
    pid_t pid = fork();
    if (pid < 0)
        die("fork failed");
    if (pid == 0) {
        for (size_t i = 0; i < BLOCKS; i++)
            free(kept[i]);
        void *p = malloc(100);
        _exit(p ? 0 : 1);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
        die("the child failed");
    for (size_t i = 0; i < BLOCKS; i++)
        free(kept[i]);
    puts("ok");
    return 0;
}
