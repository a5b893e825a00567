/* What fork-handlers.sh runs: one way of forking, or none, in a fresh
 * process under a preloaded hakmem, whose HAKMEM_STATS line then says
 * whether its fork handlers were registered (at the first pthread_create:
 * api/fork.h).
 *
 *   fork-handlers none|single|first-thread|fork|daemon|forkpty|order|concurrent
 *   fork-handlers dlopen LIBRARY
 *
 * none: allocate and free, no fork. single: the only thread forks and
 * the child allocates from every path (no handlers are registered in a
 * process that never had a second thread). first-thread: a thread starts
 * and waits without allocating; right away, the main thread's
 * malloc_stats must say the handlers are registered (glibc's
 * pthread_create callocs the thread's DTV before the thread exists). fork, daemon, forkpty: fork that way
 * while two threads allocate and free blocks of every path; the child
 * (the daemon itself, for daemon) allocates and frees from every path
 * too, which hangs if it inherited a lock held by a thread that does not
 * exist in it. order: handlers that allocate, a 4 MiB block among others
 * (a global lock of hakmem's), registered by the program's constructor
 * before anything of the program's allocates and again in main, so before
 * hakmem's: their prepare handlers run once hakmem's holds every lock, and
 * hang unless the forking thread may pass them; then the threads start
 * and the program forks 20 times; every handler must have run, once a
 * fork each (the child handlers in the child). concurrent: three threads
 * fork (two by fork, one by forkpty) 300 times each at once, while the
 * two threads allocate and another starts up to 40 threads that stay
 * (each a new heap): glibc runs the handlers of simultaneous forks at the
 * same time, and hakmem's prepare handlers, each locking the list of
 * heaps as it grew, once deadlocked on each other's heap locks (every run
 * hung). dlopen: a thread loads LIBRARY (fork-handlers-lib.c), whose
 * constructor registers handlers that allocate 0.3 s in, while the
 * dynamic linker's lock is held; 0.1 s in, the main thread forks; once
 * the library is loaded, 5 forks more, where its handlers must run. Prints
 * "ok" (the daemon's, for daemon) and exits 0 when every check holds. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <pty.h>
#include <stdatomic.h>
#include <stdint.h>
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

/* order: the program's handlers, and how often each kind ran */
static atomic_int prepares, parents, children;
static int handler_sets;   /* registered so far */
/* dlopen: the library's counts (NULL until it is loaded) */
static atomic_int *lib_children;

static void allocate_or_abort(void)
{
    if (!touch_every_path())
        abort();
}
static void prepare_handler(void) { allocate_or_abort(); atomic_fetch_add(&prepares, 1); }
static void parent_handler(void) { allocate_or_abort(); atomic_fetch_add(&parents, 1); }
static void child_handler(void) { allocate_or_abort(); atomic_fetch_add(&children, 1); }

static void register_allocating_handlers(void)
{
    if (pthread_atfork(prepare_handler, parent_handler, child_handler))
        die("pthread_atfork failed");
    handler_sets++;
}

/* Before main, and before anything of the program's allocates; after a
 * preloaded library's constructor. glibc passes argv to constructors. */
__attribute__((constructor)) static void register_in_constructor(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "order"))
        register_allocating_handlers();
}

/* The child: every handler set's child handler ran once, here (the
 * parent never runs them: its counts are 0); then allocate. */
static void child_work_and_exit(void)
{
    if (atomic_load(&children) != handler_sets)
        _exit(2);
    if (lib_children && atomic_load(lib_children) != 1)
        _exit(3);
    _exit(touch_every_path() ? 0 : 1);
}

static void wait_child(pid_t pid)
{
    int status;
    if (pid < 0)
        die("fork failed");
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        die("a child failed");
    if (WEXITSTATUS(status) == 2)
        die("a child ran the program's child handlers a wrong number of times");
    if (WEXITSTATUS(status) == 3)
        die("a child did not run the library's child handler once");
    if (WEXITSTATUS(status))
        die("a child could not allocate");
}

static void fork_one(int by_forkpty)
{
    int master = -1;
    pid_t pid = by_forkpty ? forkpty(&master, NULL, NULL, NULL) : fork();
    if (pid == 0)
        child_work_and_exit();
    wait_child(pid);
    if (master >= 0)
        close(master);
}

static atomic_int forks_done;

static void *forker(void *arg)
{
    for (int i = 0; i < 300; i++)
        fork_one(arg != NULL);
    atomic_fetch_add(&forks_done, 1);
    return NULL;
}

/* A thread that allocates, then stays until the end (blocked reading a
 * pipe that main closes): each one that starts while all others are
 * alive brings a new heap into hakmem's list of heaps, which a fork's
 * prepare handler locks. */
static int stay_pipe[2];

static void *stay(void *arg)
{
    (void)arg;
    char c;
    if (!touch_every_path())
        die("malloc failed in a thread");
    if (read(stay_pipe[0], &c, 1) != 0)
        die("the stay pipe had data");
    return NULL;
}

/* Starts such threads one by one while the forks go on. */
static void *add_heaps(void *arg)
{
    pthread_t *th = arg;
    int n = 0;
    for (; n < 40 && atomic_load(&forks_done) < 3; n++) {
        if (pthread_create(&th[n], NULL, stay, NULL))
            die("pthread_create failed");
        usleep(2000);
    }
    return (void *)(intptr_t)n;
}

static void *load(void *path)
{
    void *lib = dlopen(path, RTLD_NOW);
    if (!lib)
        die(dlerror());
    return lib;
}

/* first-thread: malloc_stats (stderr, written without malloc) goes to a
 * file while the new thread waits on a pipe, allocating nothing. */
static void *wait_on_pipe(void *arg)
{
    char c;
    return (void *)(intptr_t)read(*(int *)arg, &c, 1);
}

static void check_registered_at_first_thread(void)
{
    static int p[2];
    char path[] = "/tmp/fork-handlers-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    if (fd < 0 || saved < 0 || pipe(p))
        die("mkstemp, dup or pipe failed");
    unlink(path);
    pthread_t t;
    if (pthread_create(&t, NULL, wait_on_pipe, &p[0]))
        die("pthread_create failed");
    dup2(fd, 2);
    malloc_stats();
    dup2(saved, 2);
    close(p[1]);
    pthread_join(t, NULL);
    char buf[8192];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        die("malloc_stats printed nothing");
    buf[n] = 0;
    if (!strstr(buf, "hakmem: fork handlers: registered\n"))
        die("the fork handlers were not registered once pthread_create returned");
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc != (strcmp(argv[1], "dlopen") ? 2 : 3))
        die("usage: fork-handlers none|single|first-thread|fork|daemon|forkpty|order|concurrent, or dlopen LIBRARY");
    const char *how = argv[1];
    if (!strcmp(how, "dlopen")) {
        pthread_t loader;
        if (pthread_create(&loader, NULL, load, argv[2]))
            die("pthread_create failed");
        usleep(100000);   /* the loader is in the constructor now */
        fork_one(0);
        void *lib;
        pthread_join(loader, &lib);
        atomic_int *lib_prepares = dlsym(lib, "fork_handlers_lib_prepares");
        atomic_int *lib_parents = dlsym(lib, "fork_handlers_lib_parents");
        lib_children = dlsym(lib, "fork_handlers_lib_children");
        if (!lib_prepares || !lib_parents || !lib_children)
            die("the library's counts are missing");
        for (int i = 0; i < 5; i++)
            fork_one(0);
        if (atomic_load(lib_prepares) != 5 || atomic_load(lib_parents) != 5)
            die("the library's prepare or parent handler did not run once a fork");
        puts("ok");
        return 0;
    }
    if (!strcmp(how, "order")) {
        if (handler_sets != 1)
            die("the constructor registered no handlers");
        register_allocating_handlers();
    }
    if (!touch_every_path())
        die("malloc failed");
    if (!strcmp(how, "none")) {
        puts("ok");
        return 0;
    }
    if (!strcmp(how, "single")) {
        fork_one(0);
        puts("ok");
        return 0;
    }
    if (!strcmp(how, "first-thread")) {
        check_registered_at_first_thread();
        puts("ok");
        return 0;
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, churn, NULL))
            die("pthread_create failed");
    if (!strcmp(how, "fork")) {
        fork_one(0);
    } else if (!strcmp(how, "order")) {
        for (int i = 0; i < 20; i++)
            fork_one(0);
        if (atomic_load(&prepares) != 20 * handler_sets || atomic_load(&parents) != 20 * handler_sets)
            die("a prepare or parent handler did not run once a fork");
    } else if (!strcmp(how, "forkpty")) {
        fork_one(1);
    } else if (!strcmp(how, "concurrent")) {
        static pthread_t stayers[40];
        pthread_t f[3], adder;
        void *added;
        if (pipe(stay_pipe))
            die("pipe failed");
        if (pthread_create(&adder, NULL, add_heaps, stayers))
            die("pthread_create failed");
        for (int i = 0; i < 3; i++)
            if (pthread_create(&f[i], NULL, forker, i == 2 ? "forkpty" : NULL))
                die("pthread_create failed");
        for (int i = 0; i < 3; i++)
            pthread_join(f[i], NULL);
        pthread_join(adder, &added);
        close(stay_pipe[1]);   /* every stayer's read returns 0 */
        for (intptr_t i = 0; i < (intptr_t)added; i++)
            pthread_join(stayers[i], NULL);
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
