/* glibc's <malloc.h> extras answered for hakmem's memory: malloc_trim gives
 * memory back now, mallinfo2 and mallinfo count what hakmem holds,
 * malloc_stats and malloc_info print it. Each case runs in a fresh process
 * so that what it measures is its own. */
#include "hakmem-test.h"
/* Under the hugepage SuperSlab box a SuperSlab that holds a run keeps
 * all its pages: the cases that count pages inside such SuperSlabs skip. */
#define PARTIAL_SKIP \
  "the hugepage SuperSlab box gives pages back only with whole SuperSlabs, and this counts pages inside SuperSlabs still in use"

#include <fcntl.h>
#include <pthread.h>

/* ht_rss_bytes without stdio, whose buffers are allocated: an allocation
 * between a free and the trim would let the allocator's own clock and
 * large-drop rules give memory back first. */
static size_t
rss_bytes_no_alloc (void)
{
  char text[128];
  int fd = open ("/proc/self/statm", O_RDONLY);
  g_assert_cmpint (fd, >=, 0);
  ssize_t got = read (fd, text, sizeof text - 1);
  close (fd);
  g_assert_cmpint (got, >, 0);
  text[got] = '\0';
  const char *resident = strchr (text, ' ');
  g_assert_nonnull (resident);
  return (size_t) strtoull (resident + 1, NULL, 10) * (size_t) sysconf (_SC_PAGESIZE);
}

/* 48 MiB of `size`-byte blocks, each written in full. */
static void **
fill_48_mib (size_t size, size_t *n)
{
  *n = 48 * HT_MiB / size;
  void **b = g_new (void *, *n);
  ht_alloc_filled (b, *n, size, 0x5A);
  return b;
}

/* Everything freed: trim takes the process back to where it started, and
 * says so; a second trim finds nothing left to give. */
static void
test_trim_returns_freed_memory (void)
{
  if (!ht_in_fresh_process ())
    return;
  size_t n, start = ht_rss_bytes ();
  void **b = fill_48_mib (256, &n);
  for (size_t i = 0; i < n; i++)
    T (free) (b[i]);
  g_free (b);
  g_assert_cmpint (T (malloc_trim) (0), ==, 1);
  g_assert_cmpint (T (malloc_trim) (0), ==, 0);
  g_assert_cmpuint (ht_rss_bytes (), <, start + 8 * HT_MiB);
}

/* Nine blocks of ten freed, the tenth kept: the runs stay in use, and trim
 * gives back the pages inside them that hold no live block (3,000-byte
 * blocks: most pages hold only freed ones). */
static void
test_trim_returns_pages_inside_runs (void)
{
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!ht_in_fresh_process ())
    return;
  size_t n;
  void **b = fill_48_mib (3000, &n);
  for (size_t i = 0; i < n; i++)
    if (i % 10)
      T (free) (b[i]);
  size_t freed = rss_bytes_no_alloc ();
  g_assert_cmpint (T (malloc_trim) (0), ==, 1);
  size_t trimmed = rss_bytes_no_alloc ();
  g_assert_cmpuint (trimmed + 24 * HT_MiB, <, freed);
  for (size_t i = 0; i < n; i += 10)
    {
      g_assert_true (ht_all_bytes (b[i], 3000, 0x5A));
      T (free) (b[i]);
    }
  g_free (b);
}

/* Blocks another thread freed into the heap of an exited thread that no
 * thread adopted wait in that heap's inbox, and the heap keeps its runs
 * for an adopter: trim takes both back, rather than leave them until a
 * thread needs a new SuperSlab. */
static void *
fill_and_exit (void *arg)
{
  size_t *n = arg;
  return fill_48_mib (256, n);
}

static void
test_trim_takes_exited_threads_blocks (void)
{
  if (g_test_subprocess ())
    {
      void *own = T (malloc) (64);   /* a heap of its own: it must not adopt the filler's */
      T (free) (own);
      size_t start = rss_bytes_no_alloc (), n = 0;
      pthread_t t;
      g_assert_cmpint (pthread_create (&t, NULL, fill_and_exit, &n), ==, 0);
      void **b = NULL;
      g_assert_cmpint (pthread_join (t, (void **) &b), ==, 0);
      for (size_t i = 0; i < n; i++)
        T (free) (b[i]);
      g_free (b);
      size_t waiting = ht_stats ().bytes_out;
      g_assert_cmpuint (waiting, >=, 40 * HT_MiB);   /* in the exited thread's inbox */
      g_assert_cmpint (T (malloc_trim) (0), ==, 1);
      g_assert_cmpuint (ht_stats ().bytes_out, <, HT_MiB);
      g_assert_cmpuint (rss_bytes_no_alloc (), <, start + 8 * HT_MiB);
      return;
    }
  /* no decay tick collects them first */
  g_setenv ("HAKMEM_DECAY_MS", "60000", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_DECAY_MS");
  g_test_trap_assert_passed ();
}

/* A freed large block waits in the large cache, which mallinfo2 counts in
 * keepcost; trim unmaps it. */
static void
test_trim_empties_large_cache (void)
{
  if (!ht_large_cache_or_skip ("the direct large path keeps no freed block"))
    return;
  if (!ht_in_fresh_process ())
    return;
  size_t size = 8 * HT_MiB;
  char *p = T (malloc) (ht_opaque (size));
  g_assert_nonnull (p);
  memset (p, 1, size);
  T (free) (p);
  struct mallinfo2 cached = T (mallinfo2) ();
  g_assert_cmpuint (cached.keepcost, >=, size);
  g_assert_cmpint (T (malloc_trim) (0), ==, 1);
  struct mallinfo2 trimmed = T (mallinfo2) ();
  g_assert_cmpuint (trimmed.keepcost, ==, 0);
  g_assert_cmpuint (trimmed.arena + size, <=, cached.arena);
}

/* Trims while other threads allocate, fill, check and free blocks of every
 * size range (and free each other's): nothing a thread holds, in use or in
 * its cache, is given back or damaged. */
enum { WORKERS = 2, SLOTS = 512, ROUNDS = 20000 };
static volatile int workers_running;

static void *
churn (void *arg)
{
  uint64_t rng = (uint64_t) (uintptr_t) arg;
  static void *shared[SLOTS];   /* blocks freed by whichever thread comes next */
  void *mine[SLOTS] = { 0 };
  size_t sizes[SLOTS] = { 0 };
  for (unsigned r = 0; r < ROUNDS; r++)
    {
      unsigned k = (unsigned) (ht_rand (&rng) % SLOTS);
      if (mine[k])
        {
          ht_assert_pattern (mine[k], sizes[k], (uintptr_t) mine[k]);
          void *handed = __atomic_exchange_n (&shared[k], mine[k], __ATOMIC_ACQ_REL);
          if (handed)
            T (free) (handed);
        }
      uint64_t x = ht_rand (&rng);
      sizes[k] = x % 32 == 0 ? 4096 + x % (300 * 1024) : 16 + x % 2048;
      mine[k] = T (malloc) (sizes[k]);
      g_assert_nonnull (mine[k]);
      ht_fill (mine[k], sizes[k], (uintptr_t) mine[k]);
    }
  for (unsigned k = 0; k < SLOTS; k++)
    {
      if (mine[k])
        ht_assert_pattern (mine[k], sizes[k], (uintptr_t) mine[k]);
      T (free) (mine[k]);
      T (free) (__atomic_exchange_n (&shared[k], NULL, __ATOMIC_ACQ_REL));
    }
  __atomic_fetch_sub (&workers_running, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void
test_trim_while_threads_allocate (void)
{
  if (!ht_in_fresh_process ())
    return;
  pthread_t t[WORKERS];
  workers_running = WORKERS;
  for (uintptr_t i = 0; i < WORKERS; i++)
    g_assert_cmpint (pthread_create (&t[i], NULL, churn, (void *) (i + 1)), ==, 0);
  unsigned trims = 0;
  while (__atomic_load_n (&workers_running, __ATOMIC_ACQUIRE))
    {
      T (malloc_trim) (0);
      trims++;
    }
  for (unsigned i = 0; i < WORKERS; i++)
    g_assert_cmpint (pthread_join (t[i], NULL), ==, 0);
  g_assert_cmpuint (trims, >, 0);
}

static void
assert_arena_adds_up (const struct mallinfo2 *m)
{
  g_assert_cmpuint (m->uordblks, <=, m->arena);
  g_assert_cmpuint (m->uordblks + m->fordblks, ==, m->arena);
}

/* Small blocks count in uordblks from malloc until free (a thread cache
 * keeps a few freed ones, counted as out), large ones in hblks and
 * hblkhd. */
static void
test_mallinfo2_counts_blocks (void)
{
  if (!ht_in_fresh_process ())
    return;
  enum { N = 2000, SIZE = 700 };
  static void *b[N];
  /* the thread's cache emptied first: the heap's growth for the N blocks
   * (1.4 MB) sends bins idle since start-up back to their runs, and what
   * they held would leave uordblks meanwhile (front/batch.c) */
  T (malloc_trim) (0);
  struct mallinfo2 m0 = T (mallinfo2) ();
  ht_alloc_filled (b, N, SIZE, 0x11);
  struct mallinfo2 m1 = T (mallinfo2) ();
  assert_arena_adds_up (&m1);
  g_assert_cmpuint (m1.uordblks, >=, m0.uordblks + (size_t) N * SIZE);

  size_t big = 3 * HT_MiB;
  void *p = T (malloc) (ht_opaque (big));
  g_assert_nonnull (p);
  struct mallinfo2 m2 = T (mallinfo2) ();
  g_assert_cmpuint (m2.hblks, ==, m1.hblks + 1);
  g_assert_cmpuint (m2.hblkhd, >=, m1.hblkhd + big);
  T (free) (p);
  struct mallinfo2 m3 = T (mallinfo2) ();
  g_assert_cmpuint (m3.hblks, ==, m1.hblks);
  g_assert_cmpuint (m3.hblkhd, ==, m1.hblkhd);

  for (size_t i = 0; i < N; i++)
    T (free) (b[i]);
  struct mallinfo2 m4 = T (mallinfo2) ();
  assert_arena_adds_up (&m4);
  g_assert_cmpuint (m4.uordblks + HT_MiB, <, m1.uordblks);
}

/* The old interface reports the same figures. */
static void
test_mallinfo_matches_mallinfo2 (void)
{
  if (!ht_in_fresh_process ())
    return;
  void *p = T (malloc) (ht_opaque (5 * HT_MiB));
  void *q = T (malloc) (ht_opaque (100));
  g_assert_nonnull (p);
  g_assert_nonnull (q);
  struct mallinfo2 m2 = T (mallinfo2) ();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo m = T (mallinfo) ();
#pragma GCC diagnostic pop
  g_assert_cmpuint ((size_t) m.arena, ==, m2.arena);
  g_assert_cmpuint ((size_t) m.uordblks, ==, m2.uordblks);
  g_assert_cmpuint ((size_t) m.fordblks, ==, m2.fordblks);
  g_assert_cmpuint ((size_t) m.hblks, ==, m2.hblks);
  g_assert_cmpuint ((size_t) m.hblkhd, ==, m2.hblkhd);
  g_assert_cmpuint ((size_t) m.keepcost, ==, m2.keepcost);
  g_assert_cmpuint (m2.hblks, >=, 1);
  T (free) (p);
  T (free) (q);
}

/* What malloc_stats writes to stderr: hakmem's counters. */
static void
test_malloc_stats_prints_counters (void)
{
  if (g_test_subprocess ())
    {
      void *p = T (malloc) (ht_opaque (64));
      T (free) (p);
      T (malloc_stats) ();
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*hakmem: stats: heaps 1;*hakmem: caches: misses (refills) *");
}

/* malloc_info writes the mallinfo2 figures as XML, and takes options 0
 * only. */
static void
test_malloc_info_writes_xml (void)
{
  if (!ht_in_fresh_process ())
    return;
  void *p = T (malloc) (ht_opaque (4 * HT_MiB));
  g_assert_nonnull (p);
  FILE *f = tmpfile ();
  g_assert_nonnull (f);
  struct mallinfo2 m = T (mallinfo2) ();
  g_assert_cmpint (T (malloc_info) (0, f), ==, 0);
  rewind (f);
  char text[1024];
  size_t got = fread (text, 1, sizeof text - 1, f);
  text[got] = '\0';
  g_assert_true (g_str_has_prefix (text, "<malloc version=\"hakmem-1\">\n"));
  g_assert_true (g_str_has_suffix (text, "</malloc>\n"));
  char *mmap = strstr (text, "<total type=\"mmap\" count=\"");
  g_assert_nonnull (mmap);
  unsigned long long count = 0, size = 0;
  g_assert_cmpint (sscanf (mmap, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>", &count, &size), ==, 2);
  g_assert_cmpuint (count, ==, m.hblks);
  g_assert_cmpuint (size, ==, m.hblkhd);

  errno = 0;
  g_assert_cmpint (T (malloc_info) (1, f), ==, -1);
  g_assert_cmpint (errno, ==, EINVAL);
  fclose (f);
  T (free) (p);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/trim/returns-freed-memory", test_trim_returns_freed_memory);
  g_test_add_func ("/trim/returns-pages-inside-runs", test_trim_returns_pages_inside_runs);
  g_test_add_func ("/trim/empties-large-cache", test_trim_empties_large_cache);
  g_test_add_func ("/trim/takes-exited-threads-blocks", test_trim_takes_exited_threads_blocks);
  g_test_add_func ("/trim/while-threads-allocate", test_trim_while_threads_allocate);
  g_test_add_func ("/mallinfo2/counts-blocks", test_mallinfo2_counts_blocks);
  g_test_add_func ("/mallinfo/matches-mallinfo2", test_mallinfo_matches_mallinfo2);
  g_test_add_func ("/malloc-stats/prints-counters", test_malloc_stats_prints_counters);
  g_test_add_func ("/malloc-info/writes-xml", test_malloc_info_writes_xml);
  return g_test_run ();
}
