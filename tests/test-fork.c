/* fork: a multi-threaded parent that is allocating all the time forks; the
 * child must be able to allocate and free (no lock left held by a thread
 * that does not exist in the child), including blocks inherited from the
 * parent, and exit cleanly. */
#include "hakmem-test.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define HT_HAVE_VALGRIND_H 1
#endif
#endif

/* Under valgrind (meson test --setup=valgrind) a child runs under memcheck
 * too; it exits with valgrind's --error-exitcode (1) because blocks owned by
 * the parent's threads, which do not exist in the child, are lost there. The
 * child checks memcheck's error count itself (code CHILD_VALGRIND_ERRORS). */
static gboolean
on_valgrind (void)
{
#ifdef HT_HAVE_VALGRIND_H
  return RUNNING_ON_VALGRIND != 0;
#else
  return FALSE;
#endif
}

enum { WORKERS = 4, FORKS = 20, TIMEOUT_MS = 10000 };

/* Child exit codes, to tell failures apart in the parent's report. */
enum
{
  CHILD_OK = 0,
  CHILD_ALLOC_FAILED = 10,
  CHILD_INHERITED_DAMAGED = 11,
  CHILD_PATTERN_DAMAGED = 12,
  CHILD_THREAD_FAILED = 13,
  CHILD_GRANDCHILD_FAILED = 14,
  CHILD_NOT_OWNED = 15,
  CHILD_VALGRIND_ERRORS = 16,
  CHILD_HANDLER_NOT_RUN = 17,
  VALGRIND_ERROR_EXIT = 1,
};

static const char *
child_code_name (int code)
{
  switch (code)
    {
    case CHILD_ALLOC_FAILED: return "an allocation returned NULL";
    case CHILD_INHERITED_DAMAGED: return "a block inherited from the parent was damaged";
    case CHILD_PATTERN_DAMAGED: return "a block allocated in the child was damaged";
    case CHILD_THREAD_FAILED: return "a thread in the child failed";
    case CHILD_GRANDCHILD_FAILED: return "a grandchild failed";
    case CHILD_NOT_OWNED: return "hak_owns() != 1 for a child's block";
    case CHILD_VALGRIND_ERRORS: return "memcheck found memory errors in the child";
    case CHILD_HANDLER_NOT_RUN: return "the child's fork handler did not run once";
    default: return "unknown";
    }
}

static gint stop_workers;

/* Threads of the parent's that have entered their start routine. A
 * sanitizer's runtime sets a new thread up with its own malloc before
 * that (ASan: AsanThread::Init frees through its quarantine), and GCC
 * 12's libasan does not hold its allocator's locks across fork(): a fork
 * landing there leaves a child whose first thread waits forever on a
 * lock of ASan's (seen under load in CI). The parent forks
 * only once its threads are past that; what they do next, hakmem's
 * first call included, still races the fork. */
static gint threads_entered;

static void
thread_entered (void)
{
  g_atomic_int_inc (&threads_entered);
}

static void
wait_threads_entered (int n)
{
  while (g_atomic_int_get (&threads_entered) < n)
    g_usleep (100);
}

/* ThreadSanitizer cannot start a thread in the child of a multi-threaded
 * process ("starting new threads after multi-threaded fork is not
 * supported"; with die_after_fork=0 it dies on "dup thread with used id").
 * Under TSan such a child runs the second thread's workload on its own
 * thread instead. */
static gboolean parent_has_threads;

/* Starts n of the parent's threads running fn (argument: seed + i) and
 * waits until each has entered it. */
static void
start_parent_threads (pthread_t *t, int n, void *(*fn) (void *), gsize seed)
{
  g_atomic_int_set (&stop_workers, 0);
  g_atomic_int_set (&threads_entered, 0);
  parent_has_threads = TRUE;
  for (int i = 0; i < n; i++)
    g_assert_cmpint (pthread_create (&t[i], NULL, fn, GSIZE_TO_POINTER (seed + (gsize) i)), ==, 0);
  wait_threads_entered (n);
}

static size_t
mixed_size (uint64_t *rng)
{
  uint64_t x = ht_rand (rng);
  if (x % 200 == 0)
    return 256 * HT_KiB + (x >> 16) % (4 * HT_MiB);
  if (x % 50 < 8)
    return 1024 + (x >> 16) % (128 * HT_KiB);
  return 1 + (x >> 16) % 1024;
}

/* Parent workers: allocate/free in a loop, keeping a ring of live blocks and
 * checking their patterns. */
static void *
worker (void *arg)
{
  uint64_t rng = GPOINTER_TO_SIZE (arg);
  enum { SLOTS = 128 };
  void *p[SLOTS] = { 0 };
  size_t n[SLOTS] = { 0 };
  uint64_t seed[SLOTS] = { 0 };

  thread_entered ();
  for (unsigned ops = 0; !g_atomic_int_get (&stop_workers); ops++)
    {
      /* Keep allocating, but leave CPU time to the children (a starved
       * child must not look like a deadlocked one). */
      if (ops % 64 == 63)
        g_usleep (200);
      size_t k = ht_rand (&rng) % SLOTS;
      if (p[k])
        {
          ht_assert_pattern (p[k], n[k], seed[k]);
          T (free) (p[k]);
        }
      n[k] = mixed_size (&rng);
      seed[k] = ht_rand (&rng);
      p[k] = (ht_rand (&rng) % 8 == 0) ? T (realloc) (NULL, n[k])
                                       : T (malloc) (n[k]);
      if (!p[k])
        g_error ("worker: malloc(%zu) failed", n[k]);
      ht_fill (p[k], n[k], seed[k]);
    }
  for (size_t k = 0; k < SLOTS; k++)
    if (p[k])
      {
        ht_assert_pattern (p[k], n[k], seed[k]);
        T (free) (p[k]);
      }
  return NULL;
}

/* ---- child side: only plain C, no GLib, report through the exit code --- */

static int
child_workload (uint64_t seed)
{
  enum { N = 200 };
  void *p[N];
  size_t n[N];
  uint64_t rng = seed;

  for (int round = 0; round < 2; round++)
    {
      for (int i = 0; i < N; i++)
        {
          n[i] = mixed_size (&rng);
          if (i % 97 == 0)
            n[i] = HT_MiB + (size_t) i;  /* large */
          p[i] = (i % 5 == 0) ? T (calloc) (1, n[i]) : T (malloc) (n[i]);
          if (!p[i])
            return CHILD_ALLOC_FAILED;
          if (hak_owns (p[i]) != 1)
            return CHILD_NOT_OWNED;
          ht_fill (p[i], n[i], (uint64_t) i + seed);
        }
      for (int i = 0; i < N; i += 3)
        {
          void *q = T (realloc) (p[i], n[i] * 2 + 1);
          if (!q)
            return CHILD_ALLOC_FAILED;
          if (ht_check (q, n[i], (uint64_t) i + seed) != SIZE_MAX)
            return CHILD_PATTERN_DAMAGED;
          p[i] = q;
          n[i] = n[i] * 2 + 1;
          ht_fill (p[i], n[i], (uint64_t) i + seed);
        }
      for (int i = 0; i < N; i++)
        {
          if (ht_check (p[i], n[i], (uint64_t) i + seed) != SIZE_MAX)
            return CHILD_PATTERN_DAMAGED;
          T (free) (p[i]);
        }
      void *a = T (aligned_alloc) (HT_MiB, 100);
      if (!a)
        return CHILD_ALLOC_FAILED;
      T (free) (a);
    }
  return CHILD_OK;
}

static void *
child_thread (void *arg)
{
  return GINT_TO_POINTER (child_workload (GPOINTER_TO_SIZE (arg)));
}

typedef struct
{
  void *p;
  size_t n;
  uint64_t seed;
} Inherited;

/* In a child: forks a grandchild that runs child_workload(seed) and waits
 * for it; CHILD_OK or CHILD_GRANDCHILD_FAILED. */
static int
run_grandchild (uint64_t seed)
{
  pid_t g = fork ();
  if (g < 0)
    return CHILD_GRANDCHILD_FAILED;
  if (g == 0)
    _exit (child_workload (seed));
  int st;
  if (waitpid (g, &st, 0) != g || !WIFEXITED (st))
    return CHILD_GRANDCHILD_FAILED;
  if (WEXITSTATUS (st) != 0
      && !(WEXITSTATUS (st) == VALGRIND_ERROR_EXIT && on_valgrind ()))
    return CHILD_GRANDCHILD_FAILED;
  return CHILD_OK;
}

static int
child_main (Inherited *inh, size_t ninh, int iteration)
{
  /* Blocks the parent allocated before fork are the child's to free. */
  for (size_t i = 0; i < ninh; i++)
    {
      if (ht_check (inh[i].p, inh[i].n, inh[i].seed) != SIZE_MAX)
        return CHILD_INHERITED_DAMAGED;
      if (i % 2 == 0)
        T (free) (inh[i].p);
    }
  int rc = child_workload ((uint64_t) iteration * 31 + 1);
  if (rc)
    return rc;

  if (HT_TSAN && parent_has_threads)
    {
      rc = child_workload ((uint64_t) iteration * 31 + 2);
      if (!rc)
        rc = child_workload ((uint64_t) iteration + 5);
      if (rc)
        return rc;
      goto grandchild;
    }

  /* A new thread in the child allocates too. */
  pthread_t t;
  if (pthread_create (&t, NULL, child_thread, GSIZE_TO_POINTER (iteration + 5)) != 0)
    return CHILD_THREAD_FAILED;
  rc = child_workload ((uint64_t) iteration * 31 + 2);
  void *ret;
  pthread_join (t, &ret);
  if (rc)
    return rc;
  if (GPOINTER_TO_INT (ret))
    return GPOINTER_TO_INT (ret);

grandchild:
  /* Every fifth child forks a grandchild. */
  if (iteration % 5 == 0 && (rc = run_grandchild (12345)))
    return rc;
  for (size_t i = 1; i < ninh; i += 2)
    T (free) (inh[i].p);
#ifdef HT_HAVE_VALGRIND_H
  if (VALGRIND_COUNT_ERRORS > 0)
    return CHILD_VALGRIND_ERRORS;
#endif
  return CHILD_OK;
}

/* ---- parent side --------------------------------------------------------- */

/* Whether the kernel is tearing the process, or a child it waits for (a
 * grandchild of the test's), down: PF_EXITING in the flags of
 * /proc/PID/stat, the ninth field. Its allocator calls are then over.
 * Under ASan on a loaded machine such an exit once took over 50 s
 * (exit_mmap waiting for a file mapping's lock, state D in
 * unlink_file_vma_batch_process): slow, but no deadlock of
 * the allocator's, so the watchdog waits on. */
static gboolean
task_exiting (pid_t pid)
{
  enum { PF_EXITING_FLAG = 0x4 };
  char path[64], *text = NULL;
  g_snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
  if (!g_file_get_contents (path, &text, NULL, NULL))
    return FALSE;
  const char *rest = strrchr (text, ')');   /* the name may hold spaces */
  unsigned long flags = 0;
  gboolean exiting = rest && sscanf (rest + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) == 1
                     && (flags & PF_EXITING_FLAG);
  g_free (text);
  return exiting;
}

static gboolean
child_exiting (pid_t pid)
{
  if (task_exiting (pid))
    return TRUE;
  char path[64], *text = NULL;
  g_snprintf (path, sizeof path, "/proc/%d/task/%d/children", (int) pid, (int) pid);
  if (!g_file_get_contents (path, &text, NULL, NULL))
    return FALSE;
  gboolean exiting = FALSE;
  char *end = text;
  for (long g; !exiting && (g = strtol (end, &end, 10)) > 0;)
    exiting = task_exiting ((pid_t) g);
  g_free (text);
  return exiting;
}

/* Slow harnesses (meson test --setup=valgrind sets HT_TIMEOUT_SCALE)
 * stretch every limit: a child under memcheck is 20-50x slower. */
static gint64
timeout_scale (void)
{
  const char *scale = g_getenv ("HT_TIMEOUT_SCALE");
  return scale ? MAX (1, g_ascii_strtoll (scale, NULL, 10)) : 1;
}

static void
wait_child (pid_t pid, int iteration)
{
  int status = 0;
  gint64 timeout_ms = TIMEOUT_MS * timeout_scale ();
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  for (;;)
    {
      pid_t r = waitpid (pid, &status, WNOHANG);
      if (r == pid)
        break;
      if (r < 0)
        g_error ("waitpid: %s", g_strerror (errno));
      if (g_get_monotonic_time () > deadline && child_exiting (pid))
        deadline = g_get_monotonic_time () + timeout_ms * 1000;
      if (g_get_monotonic_time () > deadline)
        {
          kill (pid, SIGKILL);
          waitpid (pid, &status, 0);
          g_error ("fork #%d: child %d still running after %d ms "
                   "(deadlock in the allocator after fork?)",
                   iteration, (int) pid, (int) timeout_ms);
        }
      g_usleep (1000);
    }
  if (WIFSIGNALED (status))
    g_error ("fork #%d: child killed by signal %d (%s)", iteration,
             WTERMSIG (status), g_strsignal (WTERMSIG (status)));
  g_assert_true (WIFEXITED (status));
  if (WEXITSTATUS (status) == VALGRIND_ERROR_EXIT && on_valgrind ())
    return;
  if (WEXITSTATUS (status) != 0)
    g_error ("fork #%d: child exited with %d: %s", iteration,
             WEXITSTATUS (status), child_code_name (WEXITSTATUS (status)));
}

/* fork() with stdio flushed first, so that the child repeats no output. */
static pid_t
fork_flushed (void)
{
  fflush (stdout);
  fflush (stderr);
  pid_t pid = fork ();
  if (pid < 0)
    g_error ("fork: %s", g_strerror (errno));
  return pid;
}

static void
fork_many (int forks)
{
  enum { NINH = 64 };
  Inherited inh[NINH];
  uint64_t rng = 4242;

  for (int it = 0; it < forks; it++)
    {
      for (int i = 0; i < NINH; i++)
        {
          inh[i].n = mixed_size (&rng);
          inh[i].seed = ht_rand (&rng);
          inh[i].p = T (malloc) (inh[i].n);
          g_assert_nonnull (inh[i].p);
          ht_fill (inh[i].p, inh[i].n, inh[i].seed);
        }
      pid_t pid = fork_flushed ();
      if (pid == 0)
        _exit (child_main (inh, NINH, it));
      wait_child (pid, it);
      /* The parent's copies are untouched by whatever the child did. */
      for (int i = 0; i < NINH; i++)
        {
          ht_assert_pattern (inh[i].p, inh[i].n, inh[i].seed);
          T (free) (inh[i].p);
        }
    }
}

static void
test_fork_with_threads (void)
{
  pthread_t t[WORKERS];

  start_parent_threads (t, WORKERS, worker, 1);
  /* Let the workers get going so that forks land mid-allocation. */
  g_usleep (20000);
  fork_many (FORKS);
  g_atomic_int_set (&stop_workers, 1);
  for (int i = 0; i < WORKERS; i++)
    pthread_join (t[i], NULL);
}

/* What malloc_stats says of hakmem's fork handlers (its report goes to
 * stderr without allocating). */
static gboolean
fork_handlers_say (const char *state)
{
  char path[] = "/tmp/test-fork-XXXXXX";
  int fd = mkstemp (path), saved = dup (2);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (saved, >=, 0);
  unlink (path);
  dup2 (fd, 2);
  T (malloc_stats) ();
  dup2 (saved, 2);
  close (saved);
  static char buf[16384];
  ssize_t n = pread (fd, buf, sizeof buf - 1, 0);
  close (fd);
  g_assert_cmpint (n, >, 0);
  buf[n] = 0;
  char *want = g_strdup_printf ("hakmem: fork handlers: %s\n", state);
  gboolean found = strstr (buf, want) != NULL;
  g_free (want);
  return found;
}

/* A process with one thread registers no fork handlers (no other thread
 * can hold a lock at fork); its children allocate from every path. */
static void
test_fork_single_threaded (void)
{
  if (!g_test_subprocess ())
    {
      guint64 timeout_us = (guint64) timeout_scale () * 60 * G_USEC_PER_SEC;
      g_test_trap_subprocess (NULL, timeout_us, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  fork_many (5);
  g_assert_true (fork_handlers_say ("not needed (one thread)"));
}

/* fork() called from a non-main thread while other threads allocate. */
static void *
forking_thread (void *arg)
{
  (void) arg;
  fork_many (5);
  return NULL;
}

static void
test_fork_from_thread (void)
{
  pthread_t t[WORKERS], f;

  start_parent_threads (t, WORKERS, worker, 100);
  g_usleep (10000);
  g_assert_cmpint (pthread_create (&f, NULL, forking_thread, NULL), ==, 0);
  pthread_join (f, NULL);
  g_atomic_int_set (&stop_workers, 1);
  for (int i = 0; i < WORKERS; i++)
    pthread_join (t[i], NULL);
}

/* Threads start (and make their heaps) just as the parent forks, and each
 * child forks in turn: a heap that a new thread added while fork() was
 * taking every heap's lock, and was working on when the process was
 * copied, must not reach the child locked, or the child's own fork waits
 * for it forever (it did, in 36 of 60 such forks, before the fork handler
 * took heaps added meanwhile too). */
enum { STARTING_FORKS = 40, STARTING_THREADS = 3 };

/* A starting thread: a burst of allocation (its heap is made at its
 * first call), then it waits, idle, so that the threads piling up leave
 * the CPU to the children. */
static void *
starting_thread (void *arg)
{
  uint64_t rng = GPOINTER_TO_SIZE (arg);
  enum { SLOTS = 32 };
  void *p[SLOTS] = { 0 };
  thread_entered ();
  for (int i = 0; i < 500; i++)
    {
      size_t k = ht_rand (&rng) % SLOTS;
      T (free) (p[k]);
      p[k] = T (malloc) (mixed_size (&rng));
      if (!p[k])
        g_error ("starting thread: malloc failed");
    }
  while (!g_atomic_int_get (&stop_workers))
    g_usleep (1000);
  for (size_t k = 0; k < SLOTS; k++)
    T (free) (p[k]);
  return NULL;
}

static void
test_fork_while_threads_start (void)
{
  pthread_t t[STARTING_FORKS * STARTING_THREADS];
  int n = 0;

  g_atomic_int_set (&stop_workers, 0);
  g_atomic_int_set (&threads_entered, 0);
  parent_has_threads = TRUE;
  for (int it = 0; it < STARTING_FORKS; it++)
    {
      for (int i = 0; i < STARTING_THREADS; i++, n++)
        g_assert_cmpint (pthread_create (&t[n], NULL, starting_thread,
                                         GSIZE_TO_POINTER ((gsize) n + 1000)), ==, 0);
      /* Past the sanitizer's set-up, at their first allocation: hakmem
       * makes their heaps as the fork takes every heap's lock. */
      wait_threads_entered (n);
      pid_t pid = fork_flushed ();
      if (pid == 0)
        {
          int rc = child_workload ((uint64_t) it + 7);
          _exit (rc ? rc : run_grandchild ((uint64_t) it + 8));
        }
      wait_child (pid, it);
    }
  g_atomic_int_set (&stop_workers, 1);
  for (int i = 0; i < n; i++)
    pthread_join (t[i], NULL);
}

/* Another library's fork handlers, registered while the process has one
 * thread (as a library does in its constructor, or a program in main),
 * come before hakmem's, registered at the first pthread_create (api/fork.h):
 * their prepare handler runs after hakmem's has taken the locks, their
 * child handler before hakmem's releases them, and they allocate small,
 * mid and large blocks. Each handler counts its runs, so that a fork that
 * skipped them cannot pass; the child checks its own count (the parent
 * never runs child handlers). */
static void *volatile handler_block;
static gint handler_prepares, handler_parents, handler_children;

static void
allocate_in_handler (void)
{
  static const size_t sizes[] = { 48, 3000, 40 * 1024, 4 * 1024 * 1024 };
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      handler_block = T (malloc) (sizes[i]);
      if (!handler_block)
        abort ();
      memset (handler_block, 0x5a, sizes[i]);
      T (free) (handler_block);
    }
}

static void prepare_allocating (void) { allocate_in_handler (); g_atomic_int_inc (&handler_prepares); }
static void parent_allocating (void) { allocate_in_handler (); g_atomic_int_inc (&handler_parents); }
static void child_allocating (void) { allocate_in_handler (); g_atomic_int_inc (&handler_children); }

static void
test_fork_other_handlers_allocate (void)
{
  if (!g_test_subprocess ())
    {
      /* a fork that hangs in a handler fails the test, not the suite */
      guint64 timeout_us = (guint64) timeout_scale () * 60 * G_USEC_PER_SEC;
      g_test_trap_subprocess (NULL, timeout_us, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  g_assert_true (fork_handlers_say ("not needed (one thread)"));
  g_assert_cmpint (pthread_atfork (prepare_allocating, parent_allocating,
                                   child_allocating), ==, 0);
  pthread_t t;
  g_atomic_int_set (&stop_workers, 0);
  g_atomic_int_set (&threads_entered, 0);
  g_assert_cmpint (pthread_create (&t, NULL, worker, GSIZE_TO_POINTER (77)), ==, 0);
  /* interposed, hakmem registers in the calloc pthread_create makes;
   * called as hak_* (sanitizer builds), at the new thread's first call */
  if (HT_INTERPOSE)
    g_assert_true (fork_handlers_say ("registered"));
  wait_threads_entered (1);
  for (int ms = 0; !fork_handlers_say ("registered"); ms++)
    {
      if (ms == 10000)
        g_error ("fork handlers not registered 10 s after the second thread started");
      g_usleep (1000);
    }
  for (int it = 0; it < 5; it++)
    {
      pid_t pid = fork_flushed ();
      if (pid == 0)
        _exit (g_atomic_int_get (&handler_children) == 1 ? child_workload ((uint64_t) it + 300)
                                                          : CHILD_HANDLER_NOT_RUN);
      wait_child (pid, it);
      g_assert_cmpint (g_atomic_int_get (&handler_prepares), ==, it + 1);
      g_assert_cmpint (g_atomic_int_get (&handler_parents), ==, it + 1);
    }
  g_assert_cmpint (g_atomic_int_get (&handler_children), ==, 0);
  g_atomic_int_set (&stop_workers, 1);
  pthread_join (t, NULL);
}

/* Several threads fork at once while others allocate: glibc runs the
 * forks' handlers concurrently (it holds its list only while it reads
 * it), so each fork's prepare must wait for the locks the other one
 * holds, and release them in both processes. */
enum { FORKING_THREADS = 2, FORKS_EACH = 5, ALLOCATING_THREADS = 2 };

static void *
forking_at_once (void *arg)
{
  int base = GPOINTER_TO_INT (arg);
  for (int it = 0; it < FORKS_EACH; it++)
    {
      pid_t pid = fork_flushed ();
      if (pid == 0)
        _exit (child_workload ((uint64_t) (base + it)));
      wait_child (pid, base + it);
    }
  return NULL;
}

static void
test_fork_from_several_threads (void)
{
  pthread_t w[ALLOCATING_THREADS], f[FORKING_THREADS];

  start_parent_threads (w, ALLOCATING_THREADS, worker, 500);
  for (int i = 0; i < FORKING_THREADS; i++)
    g_assert_cmpint (pthread_create (&f[i], NULL, forking_at_once,
                                     GINT_TO_POINTER (1000 * (i + 1))), ==, 0);
  for (int i = 0; i < FORKING_THREADS; i++)
    pthread_join (f[i], NULL);
  g_atomic_int_set (&stop_workers, 1);
  for (int i = 0; i < ALLOCATING_THREADS; i++)
    pthread_join (w[i], NULL);
}

/* A thread asks a large block's size again and again (each call reads
 * its span's header counted as a reader, backend/large.h) while the main
 * thread forks. The child frees large blocks with no cache, so each free
 * unmaps a span, which waits for the readers first: a count inherited
 * from a fork that landed in the parent's counted section would make the
 * child wait for a thread it does not have. */
enum { ASKED_SIZE = 300 * 1024, ASKED_FORKS = 40 };
static void *asked_block;

static void *
asking_sizes (void *arg)
{
  (void) arg;
  g_atomic_int_inc (&threads_entered);
  while (!g_atomic_int_get (&stop_workers))
    if (T (malloc_usable_size) (asked_block) < ASKED_SIZE)
      g_error ("malloc_usable_size of a %d-byte block is too small", ASKED_SIZE);
  return NULL;
}

static void
test_fork_while_large_sizes_asked (void)
{
  g_setenv ("HAKMEM_LARGE_CACHE_MB", "0", TRUE);
  if (!ht_in_process_with_decay (NULL))
    return;
  asked_block = T (malloc) (ASKED_SIZE);
  g_assert_nonnull (asked_block);
  pthread_t t;
  start_parent_threads (&t, 1, asking_sizes, 0);
  for (int it = 0; it < ASKED_FORKS; it++)
    {
      pid_t pid = fork_flushed ();
      if (pid == 0)
        {
          for (int k = 0; k < 4; k++)
            {
              unsigned char *b = T (malloc) (ASKED_SIZE + (size_t) k * 4096);
              if (!b)
                _exit (CHILD_ALLOC_FAILED);
              b[0] = 1;
              T (free) (b);
            }
          _exit (CHILD_OK);
        }
      wait_child (pid, it);
    }
  g_atomic_int_set (&stop_workers, 1);
  pthread_join (t, NULL);
  T (free) (asked_block);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/fork/single-threaded", test_fork_single_threaded);
  g_test_add_func ("/fork/with-allocating-threads", test_fork_with_threads);
  g_test_add_func ("/fork/from-thread", test_fork_from_thread);
  g_test_add_func ("/fork/while-threads-start", test_fork_while_threads_start);
  g_test_add_func ("/fork/other-handlers-allocate", test_fork_other_handlers_allocate);
  g_test_add_func ("/fork/from-several-threads-at-once", test_fork_from_several_threads);
  g_test_add_func ("/fork/while-large-sizes-asked", test_fork_while_large_sizes_asked);

  return g_test_run ();
}
