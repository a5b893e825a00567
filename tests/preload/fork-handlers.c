/* What fork-handlers.sh runs: one way of forking, or none, in a fresh
 * process under a preloaded hakmem, whose HAKMEM_STATS line then says
 * whether its fork handlers were registered (see core/fork.h: not before
 * the first fork, daemon or forkpty, or before another library registers
 * handlers).
 *
 *   fork-handlers none|fork|daemon|forkpty|order
 *
 * none: allocate and free, no fork. fork, daemon, forkpty: fork that way
 * while two threads allocate and free blocks of every path; the child
 * (the daemon itself, for daemon) allocates and frees from every path
 * too, which hangs if it inherited a lock held by a thread that does not
 * exist in it. order: first register handlers that allocate, a 4 MiB
 * block among others (a global lock of hakmem's: they hang if hakmem's
 * prepare handler ran before them), then start the threads and fork 20
 * times. Prints "ok" (the daemon's, for daemon) and exits 0 when every
 * check holds. */
#define _GNU_SOURCE
#include <pthread.h>
#include <pty.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int stop;

static void die(const char *what)
{
    fprintf(stderr, "fork-handlers: %s\n", what);
    exit(1);
}

/* One block of each path: tiny, mid (Pool TLS), large. */
static int touch_every_path(void)
{
    static const size_t sizes[] = { 24, 700, 5000, 100000, 4u << 20 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char *p = malloc(sizes[i]);
        if (!p)
            return 0;
        memset(p, 0x5a, sizes[i]);
        free(p);
    }
    return 1;
}

static void *churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop))
        if (!touch_every_path())
            die("malloc failed in a thread");
    return NULL;
}

static void allocating_handler(void)
{
    if (!touch_every_path())
        abort();
}

static void child_work_and_exit(void)
{
    _exit(touch_every_path() ? 0 : 1);
}

static void wait_child(pid_t pid)
{
    int status;
    if (pid < 0)
        die("fork failed");
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
        die("a child failed");
}

int main(int argc, char **argv)
{
    if (argc != 2)
        die("usage: fork-handlers none|fork|daemon|forkpty|order");
    const char *how = argv[1];
    if (!strcmp(how, "order") && pthread_atfork(allocating_handler, allocating_handler, allocating_handler))
        die("pthread_atfork failed");
    if (!touch_every_path())
        die("malloc failed");
    if (!strcmp(how, "none")) {
        puts("ok");
        return 0;
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, churn, NULL))
            die("pthread_create failed");
    if (!strcmp(how, "fork") || !strcmp(how, "order")) {
        for (int i = 0; i < (strcmp(how, "order") ? 1 : 20); i++) {
            pid_t pid = fork();
            if (pid == 0)
                child_work_and_exit();
            wait_child(pid);
        }
    } else if (!strcmp(how, "forkpty")) {
        int master;
        pid_t pid = forkpty(&master, NULL, NULL, NULL);
        if (pid == 0)
            child_work_and_exit();
        wait_child(pid);
        close(master);
    } else if (!strcmp(how, "daemon")) {
        /* the parent exits here with 0; the daemon carries on, with
         * stdout and stderr still the caller's, and only its own thread */
        if (daemon(1, 1))
            die("daemon failed");
        if (!touch_every_path())
            die("malloc failed in the daemon");
        puts("ok");
        return 0;
    } else {
        die("unknown way of forking");
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    puts("ok");
    return 0;
}
