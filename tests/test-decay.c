/* Purge on a clock (HAKMEM_DECAY_MS): memory that stays free for a decay
 * period goes back to the OS, without the program doing anything but keep
 * allocating; with the option at 0 it stays resident (cached for reuse).
 * Each case runs in a fresh process with the option set in its
 * environment, which the allocator reads once, at start-up. */
#include "hakmem-test.h"
/* Under the hugepage SuperSlab box a SuperSlab that holds a run keeps
 * all its pages: the cases that count pages inside such SuperSlabs skip. */
#define PARTIAL_SKIP \
  "the hugepage SuperSlab box gives pages back only with whole SuperSlabs, and this counts pages inside SuperSlabs still in use"

#include <pthread.h>
#include <sys/mman.h>

enum { NBLOCKS = 128, BLOCK = 32 * 1024 };   /* 4 MiB: two or three SuperSlabs */
static void *blocks[NBLOCKS];

static void
free_all (void *const *b, size_t n)
{
  for (size_t i = 0; i < n; i++)
    T (free) (b[i]);
}

/* A thread that fills 4 MiB and frees it all before it exits: its heap's
 * SuperSlabs end up empty, in the pool of ready ones. */
static void *
fill_and_free (void *arg)
{
  (void) arg;
  ht_alloc_filled (blocks, NBLOCKS, BLOCK, 0x3C);
  free_all (blocks, NBLOCKS);
  return NULL;
}

/* Resident pages among those the n blocks of `size` bytes at b[] covered
 * (b[i] NULL: skipped); addresses no longer mapped count as not resident.
 * Nothing is read from them. */
static size_t
resident_of (void *const *b, size_t n, size_t size, size_t *total)
{
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);
  unsigned char vec[64 * 1024 / 4096 + 1];
  size_t resident = 0;
  *total = 0;
  for (size_t i = 0; i < n; i++)
    {
      if (!b[i])
        continue;
      uintptr_t start = (uintptr_t) b[i] & ~(uintptr_t) (page - 1);
      size_t pages = ((uintptr_t) b[i] + size - start + page - 1) / page;
      g_assert_cmpuint (pages, <=, sizeof vec);
      *total += pages;
      if (mincore ((void *) start, pages * page, vec) != 0)
        continue;
      for (size_t k = 0; k < pages; k++)
        resident += vec[k] & 1;
    }
  return resident;
}

/* Resident pages among those the thread's blocks covered. */
static size_t
resident_pages (size_t *total)
{
  return resident_of (blocks, NBLOCKS, BLOCK, total);
}

/* Runs the thread, then keeps allocating for up to `patience_ms`; returns
 * the resident pages left at the end (or as soon as there are none). */
static size_t
run_case (unsigned patience_ms, size_t *total)
{
  ht_keep_allocating ();   /* the main thread's runs exist before the thread's memory is freed */
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, fill_and_free, NULL), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  size_t resident = resident_pages (total);
  g_assert_cmpuint (resident, >, 0);   /* written, freed, still cached */
  gint64 deadline = g_get_monotonic_time () + (gint64) patience_ms * 1000;
  while (g_get_monotonic_time () < deadline)
    {
      g_usleep (2000);
      ht_keep_allocating ();
      if ((resident = resident_pages (total)) == 0)
        break;
    }
  return resident;
}

static void
test_freed_memory_returned (void)
{
  if (!ht_in_process_with_decay ("10"))
    return;
  size_t total, resident = run_case (10000, &total);
  if (resident)
    g_error ("%zu of %zu pages freed 10 s ago are still resident with HAKMEM_DECAY_MS=10",
             resident, total);
}

static void
test_decay_off_keeps_cache (void)
{
  if (!ht_in_process_with_decay ("0"))
    return;
  size_t total, resident = run_case (200, &total);
  /* the emptied SuperSlabs wait in the ready pool (HAKMEM_SS_CACHE) */
  if (resident < total / 2)
    g_error ("only %zu of %zu freed pages resident with HAKMEM_DECAY_MS=0", resident, total);
}

/* A heap that frees most of its memory at once, beyond what its recent
 * high covers (its clock has not ticked yet: no high), gives the free slabs
 * beyond a bound (32 MiB) back as their runs empty (in batches of at most
 * 8 MiB, backend/heap_runs.c), with no further
 * malloc and before any clock could: the clock only looks on misses, and
 * a program that frees 90% and goes on with other work would otherwise
 * keep it all resident (fragment's final RSS). One block in ten stays live, so
 * no SuperSlab empties and goes to the pool, which purges on its own. */
enum { DROP_BLOCKS = 1536, DROP_BLOCK = 64 * 1024 };   /* 96 MiB */
enum { DROP_BOUND_MIB = 32, DROP_BATCH_MIB = 8, DROP_SLACK_MIB = 4 };   /* + a bin of 64 KiB blocks, rounding */
static void *drop[DROP_BLOCKS];

static void
test_large_drop_returned_at_once (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!ht_in_process_with_decay ("60000"))
    return;
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);
  ht_alloc_filled (drop, DROP_BLOCKS, DROP_BLOCK, 0x5A);
  void *live[DROP_BLOCKS / 10 + 1];
  size_t nlive = 0;
  for (size_t i = 0; i < DROP_BLOCKS; i++)
    if (i % 10 != 0)
      T (free) (drop[i]);
    else
      {
        live[nlive++] = drop[i];
        drop[i] = NULL;   /* resident_of looks at the freed ones only */
      }
  size_t freed_pages, resident = resident_of (drop, DROP_BLOCKS, DROP_BLOCK, &freed_pages);
  size_t limit = (size_t) (DROP_BOUND_MIB + DROP_BATCH_MIB + DROP_SLACK_MIB) * HT_MiB / page;
  g_test_message ("%zu of %zu freed pages resident", resident, freed_pages);
  if (resident > limit)
    g_error ("%zu of %zu freed pages still resident right after the frees (at most %zu expected)",
             resident, freed_pages, limit);
  free_all (live, nlive);
}

/* Slabs past the bound go back in batches, one call a stretch of free
 * slabs: a heap freed in the order it was built (blocks of 64 KiB, a slab
 * each, one in 32 kept so that no SuperSlab empties) made a call for each
 * of the ~1,000 slabs past the bound. */
static unsigned long long stats_purges_over_bound (void);

static void
test_drop_returned_in_batches (void)
{
  if (!ht_in_process_with_decay ("60000"))
    return;
  ht_alloc_filled (drop, DROP_BLOCKS, DROP_BLOCK, 0x3C);
  unsigned long long before = stats_purges_over_bound ();
  size_t freed = 0;
  for (size_t i = 0; i < DROP_BLOCKS; i++)
    if (i % 32 != 0)
      {
        T (free) (drop[i]);
        drop[i] = NULL;
        freed++;
      }
  unsigned long long calls = stats_purges_over_bound () - before;
  size_t past_bound = freed - (size_t) DROP_BOUND_MIB * HT_MiB / DROP_BLOCK;
  g_test_message ("%llu purge calls for %zu slabs freed past the bound", calls, past_bound);
  g_assert_cmpuint (calls, >, 0);
  if (calls > past_bound / 8)
    g_error ("%llu purge calls for %zu slabs freed in order past the bound", calls, past_bound);
  free_all (drop, DROP_BLOCKS);
}

/* A thread that keeps blocks of a class in its cache, then goes on with
 * other sizes, gives them back: a bin untouched for a decay period is
 * emptied into the heap, which releases the class's runs (whose pages the
 * clock then purges, as the cases above check, or hands to the runs of
 * the sizes in use). The 64 KiB blocks here (2 MiB, a bin's worth) used
 * to stay cached, and out of their runs, for as long as the thread lived.
 * Measured with the allocator's own count of bytes out of runs (in use or
 * cached): the process's RSS would count a sanitizer's memory too. */
enum { CACHED_BLOCKS = 32, CACHED_BLOCK = 64 * 1024 };
static void *cached[CACHED_BLOCKS];

static void
test_idle_cache_returned (void)
{
  if (!ht_pool_bins_or_skip ("no Pool TLS box (HAKMEM_POOL=none or -Dpool=off): 64 KiB blocks are not cached"))
    return;
  if (!ht_in_process_with_decay ("10"))
    return;
  ht_keep_allocating ();   /* the sizes in use have their runs */
  size_t before = ht_stats ().bytes_out;
  ht_alloc_filled (cached, CACHED_BLOCKS, CACHED_BLOCK, 0x77);
  free_all (cached, CACHED_BLOCKS);
  size_t cached_bytes = (size_t) CACHED_BLOCKS * CACHED_BLOCK, out = ht_stats ().bytes_out;
  g_assert_cmpuint (out, >=, before + cached_bytes / 2);   /* freed into the cache, still there */
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (out >= before + cached_bytes / 4 && g_get_monotonic_time () < deadline)
    {
      g_usleep (2000);
      ht_keep_allocating ();   /* other sizes: the thread misses, its heap ticks */
      out = ht_stats ().bytes_out;
    }
  g_test_message ("%zu KiB out of runs before, %zu KiB after", before >> 10, out >> 10);
  if (out >= before + cached_bytes / 4)
    g_error ("%zu KiB out of runs, %zu KiB before 2 MiB went into the thread's cache 10 s ago",
             out >> 10, before >> 10);
}

/* The count of free slabs that bounds them (32 MiB) follows the clock's
 * purges: a heap whose free slabs never come near the bound makes no
 * purge as runs go back. A count that missed the clock's purges and
 * SuperSlabs leaving the heap would grow by each cycle's 14 MiB and, stuck
 * past the bound, have every run released purged at once. */
enum { CYCLE_BLOCKS = 224, CYCLE_BLOCK = 64 * 1024, CYCLES = 12 };   /* 14 MiB a cycle */
static void *cycle_blocks[CYCLE_BLOCKS];

static unsigned long long
stats_purges_over_bound (void)
{
  return ht_stats ().dirty_purges;
}

static void
test_bound_follows_purges (void)
{
  if (!ht_in_process_with_decay ("10"))
    return;
  for (int c = 0; c < CYCLES; c++)
    {
      ht_alloc_filled (cycle_blocks, CYCLE_BLOCKS, CYCLE_BLOCK, c);
      for (size_t i = 0; i < CYCLE_BLOCKS; i++)
        if (i % 16 != 0)   /* one in 16 stays: its SuperSlab stays with the heap */
          {
            T (free) (cycle_blocks[i]);
            cycle_blocks[i] = NULL;
          }
      for (int k = 0; k < 6; k++)   /* a few decay periods with misses: the clock purges */
        {
          g_usleep (12 * 1000);
          ht_keep_allocating ();
        }
      for (size_t i = 0; i < CYCLE_BLOCKS; i++)
        T (free) (cycle_blocks[i]);
    }
  unsigned long long purged = stats_purges_over_bound ();
  if (purged)
    g_error ("%llu purge calls for free slabs over the bound, with at most 14 MiB of them", purged);
}

/* Runs a thread's exit kept for the thread that adopts its heap go back
 * once that thread has left them unused for a decay period, and their
 * pages with them, rather than stay with the adopter for good (2 MiB of
 * 16 KiB blocks here). The
 * class's current run (4 of those blocks) stays: a quarter of the pages
 * at most may remain. */
enum { KEPT_BLOCKS = 128, KEPT_BLOCK = 16 * 1024 };
static void *kept[KEPT_BLOCKS];

/* The pages are checked resident here, as the thread exits, and not when
 * the adopter starts: on a loaded machine the adopter may first run more
 * than a decay period later, when they may rightly be gone already. */
static void *
fill_kept_and_exit (void *arg)
{
  (void) arg;
  size_t total;
  ht_alloc_filled (kept, KEPT_BLOCKS, KEPT_BLOCK, 0x21);
  free_all (kept, KEPT_BLOCKS);
  g_assert_cmpuint (resident_of (kept, KEPT_BLOCKS, KEPT_BLOCK, &total), >, total / 2);
  return NULL;   /* its heap is abandoned with those runs */
}

/* Misses (so the heap's clock ticks) with no run made or released: 400
 * blocks of 16 bytes come from one run (a slab holds 4096), more than a
 * bin holds (256). keep_allocating's runs come and go, and a new run
 * would go to the slabs given back here, before the clock purged them. */
static void
keep_missing_in_one_run (void)
{
  void *p[400];
  for (size_t k = 0; k < G_N_ELEMENTS (p); k++)
    {
      p[k] = T (malloc) (16);
      g_assert_nonnull (p[k]);
    }
  for (size_t k = 0; k < G_N_ELEMENTS (p); k++)
    T (free) (p[k]);
}

static void *
adopt_and_work (void *arg)
{
  size_t *left = arg, total;
  keep_missing_in_one_run ();   /* set up: this thread adopted the heap */
  size_t resident = resident_of (kept, KEPT_BLOCKS, KEPT_BLOCK, &total);
  gint64 deadline = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  while (resident > total / 4 && g_get_monotonic_time () < deadline)
    {
      g_usleep (2000);
      keep_missing_in_one_run ();
      resident = resident_of (kept, KEPT_BLOCKS, KEPT_BLOCK, &total);
    }
  *left = resident;
  return NULL;
}

/* Runs `exiting` in a thread to its end, then `adopter` in another (it
 * adopts the first one's heap); returns the resident page count the
 * adopter stored through its argument. */
static size_t
exit_then_adopt (void *(*exiting) (void *), void *(*adopter) (void *))
{
  pthread_t t;
  size_t left = 0;
  g_assert_cmpint (pthread_create (&t, NULL, exiting, NULL), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  g_assert_cmpint (pthread_create (&t, NULL, adopter, &left), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  return left;
}

static void
test_kept_runs_released (void)
{
  if (!ht_in_process_with_decay ("10"))
    return;
  size_t total, left = exit_then_adopt (fill_kept_and_exit, adopt_and_work);
  resident_of (kept, KEPT_BLOCKS, KEPT_BLOCK, &total);
  if (left > total / 4)
    g_error ("%zu of the %zu pages an exited thread's runs kept are still resident after 5 s",
             left, total);
}

/* An exited thread's heap that nobody adopted for a decay period gives
 * back, when another thread scavenges it, the pages of the slabs its
 * released runs leave free, also in a SuperSlab that one of its blocks
 * still alive elsewhere keeps from going back to the pool: nobody would
 * use them, and an idle heap's clock purges only a few slabs a tick, so
 * with many exited threads' heaps they stayed resident (oversub_8). Here
 * the thread's runs of 16 KiB blocks (1.5 MiB) are left with two blocks
 * out; a feeder thread frees one of them once the heap has waited three
 * periods, and its exit scavenges the heap it fed. */
enum { ORPHAN_BLOCKS = 96, ORPHAN_BLOCK = 16 * 1024 };
static void *orphan[ORPHAN_BLOCKS];
static pthread_barrier_t orphan_sync;

static void *
orphan_maker (void *arg)
{
  (void) arg;
  ht_alloc_filled (orphan, ORPHAN_BLOCKS, ORPHAN_BLOCK, 0x5e);
  free_all (orphan + 2, ORPHAN_BLOCKS - 2);   /* the first two stay out */
  return NULL;
}

static void *
orphan_feeder (void *arg)
{
  (void) arg;
  void *own = T (malloc) (64);   /* this thread has its own heap */
  g_assert_nonnull (own);
  pthread_barrier_wait (&orphan_sync);   /* ready, before the maker starts */
  pthread_barrier_wait (&orphan_sync);   /* the maker has exited, periods ago */
  T (free) (orphan[1]);   /* to the orphaned heap's inbox */
  T (free) (own);
  return NULL;   /* its exit scavenges the heap it fed */
}

static void
test_orphan_free_slabs_purged (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!ht_in_process_with_decay ("10"))
    return;
  ht_keep_allocating ();   /* the main thread has its heap */
  g_assert_cmpint (pthread_barrier_init (&orphan_sync, NULL, 2), ==, 0);
  pthread_t feeder, maker;
  g_assert_cmpint (pthread_create (&feeder, NULL, orphan_feeder, NULL), ==, 0);
  pthread_barrier_wait (&orphan_sync);   /* else the feeder might adopt the maker's heap */
  g_assert_cmpint (pthread_create (&maker, NULL, orphan_maker, NULL), ==, 0);
  g_assert_cmpint (pthread_join (maker, NULL), ==, 0);
  size_t total, before = resident_of (orphan + 2, ORPHAN_BLOCKS - 2, ORPHAN_BLOCK, &total);
  g_assert_cmpuint (before, >, total / 2);   /* kept for an adopter */
  g_usleep (30 * 1000);
  pthread_barrier_wait (&orphan_sync);
  g_assert_cmpint (pthread_join (feeder, NULL), ==, 0);
  size_t left = resident_of (orphan + 2, ORPHAN_BLOCKS - 2, ORPHAN_BLOCK, &total);
  if (left > total / 8)
    g_error ("%zu of the %zu pages of an exited thread's released runs are still resident", left, total);
  T (free) (orphan[0]);
  g_assert_cmpint (pthread_barrier_destroy (&orphan_sync), ==, 0);
}

/* Heaps of exited threads wait for adoption newest first, and a decay
 * tick that looks after one of them takes the oldest, never the head: a
 * thread that starts while another exits adopts the heap its predecessor
 * left, and a heap no thread needs stays out of use until its runs go
 * back. Two threads end at once here, the first (the filler) leaving
 * 2 MiB of 16 KiB blocks freed in its runs; then threads that use as much
 * run one after the other while the main thread ticks: each must adopt
 * the heap the last one left, never the filler's. A tick that took the
 * queue's head and put it behind the others made them adopt the two heaps
 * in turn, so that both stayed in use with their memory (churn_threads
 * kept a fourth heap warm for its three threads at a time). */
enum { SPARE_BLOCKS = 128, SPARE_BLOCK = 16 * 1024 };
static void *spare[SPARE_BLOCKS];
static pthread_barrier_t spare_sync;

static void *
spare_filler (void *arg)
{
  (void) arg;
  ht_alloc_filled (spare, SPARE_BLOCKS, SPARE_BLOCK, 0x2a);
  free_all (spare, SPARE_BLOCKS);
  pthread_barrier_wait (&spare_sync);   /* both threads own a heap */
  return NULL;
}

static void *
spare_partner (void *arg)
{
  (void) arg;
  void *p = T (malloc) (64);
  g_assert_nonnull (p);
  pthread_barrier_wait (&spare_sync);
  pthread_barrier_wait (&spare_sync);   /* the filler has exited */
  T (free) (p);
  return NULL;
}

/* Uses as much as the filler's heap holds. */
static void *
short_thread (void *arg)
{
  (void) arg;
  void *b[SPARE_BLOCKS];
  ht_alloc_filled (b, SPARE_BLOCKS, SPARE_BLOCK, 0x2b);
  free_all (b, SPARE_BLOCKS);
  return NULL;
}

/* The refills of heap `id` so far. */
static uint64_t
heap_refills (uint64_t id)
{
  struct hak_stats s = ht_stats ();
  g_assert_cmpuint (s.heaps_listed, ==, s.heaps);
  for (unsigned i = 0; i < s.heaps_listed; i++)
    if (s.heap[i].id == id)
      return s.heap[i].refills;
  g_error ("no heap %llu", (unsigned long long) id);
}

static void
test_spare_heap_left_out_of_use (void)
{
  if (!ht_in_process_with_decay ("50"))
    return;
  ht_keep_allocating ();   /* the main thread has its heap */
  g_assert_cmpint (pthread_barrier_init (&spare_sync, NULL, 2), ==, 0);
  pthread_t filler, partner;
  g_assert_cmpint (pthread_create (&partner, NULL, spare_partner, NULL), ==, 0);
  g_assert_cmpint (pthread_create (&filler, NULL, spare_filler, NULL), ==, 0);
  g_assert_cmpint (pthread_join (filler, NULL), ==, 0);
  pthread_barrier_wait (&spare_sync);
  g_assert_cmpint (pthread_join (partner, NULL), ==, 0);
  g_assert_cmpint (pthread_barrier_destroy (&spare_sync), ==, 0);
  /* the filler's heap: the exited one with the most refills */
  struct hak_stats s = ht_stats ();
  uint64_t id = 0, refills = 0;
  for (unsigned i = 0; i < s.heaps_listed; i++)
    if (s.heap[i].thread_exited && s.heap[i].refills > refills)
      {
        id = s.heap[i].id;
        refills = s.heap[i].refills;
      }
  g_assert_cmpuint (id, !=, 0);
  /* 8 periods: the main thread ticks several times meanwhile */
  gint64 end = g_get_monotonic_time () + 8 * 50 * 1000;
  unsigned threads = 0;
  while (g_get_monotonic_time () < end)
    {
      pthread_t t;
      g_assert_cmpint (pthread_create (&t, NULL, short_thread, NULL), ==, 0);
      g_assert_cmpint (pthread_join (t, NULL), ==, 0);
      ht_keep_allocating ();
      g_usleep (1000);
      threads++;
    }
  if (heap_refills (id) != refills)
    g_error ("one of %u threads started one after the other adopted the heap of a thread "
             "that exited before, not the one its predecessor left", threads);
}

/* A heap whose size swings keeps, between crests, the free slabs it had in
 * runs at its recent high: giving them back at each trough only to fault
 * them in again at the next crest cost a madvise (and page faults) a few
 * times a decay period and lowered no peak (realloc_grow: 2.4 calls per
 * 100,000 operations; every page freed here was purged within 40 ms, as
 * its emptied SuperSlabs went to the pool, which purges on its own). Once
 * the heap stays small for two epochs of its high, they go back. */
enum { SWING_BLOCKS = 192, SWING_BLOCK = 64 * 1024, SWINGS = 3 };   /* 12 MiB crests */
static void *swing[SWING_BLOCKS];

/* Misses for about `periods` decay periods of `ms`: the heap's clock ticks
 * and samples its size. */
static void
tick_for (unsigned periods, unsigned ms)
{
  for (unsigned k = 0; k < periods; k++)
    {
      g_usleep (ms * 1000);
      ht_keep_allocating ();
    }
}

static void
test_swinging_heap_keeps_slabs (void)
{
  if (!ht_in_process_with_decay ("5"))
    return;
  ht_keep_allocating ();
  for (int c = 0; c < SWINGS; c++)
    {
      ht_alloc_filled (swing, SWING_BLOCKS, SWING_BLOCK, c);
      tick_for (4, 5);   /* the crest */
      free_all (swing, SWING_BLOCKS);
      tick_for (10, 5);  /* the trough: without the recent high, idle slabs would go after two ticks */
      size_t total, resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
      g_test_message ("swing %d: %zu of %zu freed pages resident", c, resident, total);
      if (resident < total)
        g_error ("swing %d: %zu of the %zu pages freed 50 ms before the next crest were given back",
                 c, total - resident, total);
    }
}

static void
test_shrunk_heap_returns_slabs (void)
{
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!ht_in_process_with_decay ("2"))
    return;
  ht_keep_allocating ();
  ht_alloc_filled (swing, SWING_BLOCKS, SWING_BLOCK, 0x42);
  tick_for (4, 2);
  free_all (swing, SWING_BLOCKS);
  size_t total, resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (resident > total / 8 && g_get_monotonic_time () < deadline)
    {
      tick_for (1, 2);
      resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
    }
  if (resident > total / 8)
    g_error ("%zu of %zu pages freed 10 s ago are still resident", resident, total);
}

/* A heap that frees most of a large crest (96 MiB, three times the bound
 * past which a drop goes back at once) keeps it for its next crest, which
 * takes the same pages again without a fault: its recent high covers it
 * (big_heap freed 1 GiB and faulted it all in again). Once the heap stays
 * small, the clock gives it back. One block in ten stays live. */
static void
test_large_swing_kept_then_returned (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!ht_in_process_with_decay ("5"))
    return;
  ht_keep_allocating ();
  void *live[DROP_BLOCKS / 10 + 1];
  size_t nlive = 0, total, resident;
  for (int crest = 0; crest < 2; crest++)
    {
      for (size_t i = 0; i < DROP_BLOCKS; i++)
        g_assert_nonnull (drop[i] = T (malloc) (DROP_BLOCK));
      if (crest == 1)
        {
          /* before anything is written: the pages freed at the trough */
          resident = resident_of (drop, DROP_BLOCKS, DROP_BLOCK, &total);
          g_test_message ("second crest: %zu of %zu pages resident before written", resident, total);
          if (resident < total * 3 / 4)
            g_error ("%zu of the %zu pages of the second crest were resident before it wrote them",
                     resident, total);
        }
      for (size_t i = 0; i < DROP_BLOCKS; i++)
        memset (drop[i], 0x5A, DROP_BLOCK);
      tick_for (4, 5);   /* the crest, sampled by the clock */
      for (size_t i = 0; i < DROP_BLOCKS; i++)
        if (i % 10 != 0)
          T (free) (drop[i]);
        else
          {
            live[nlive++] = drop[i];
            drop[i] = NULL;
          }
      resident = resident_of (drop, DROP_BLOCKS, DROP_BLOCK, &total);
      g_test_message ("trough %d: %zu of %zu freed pages resident", crest, resident, total);
      if (resident < total * 3 / 4)
        g_error ("trough %d: %zu of the %zu pages freed were given back at once", crest,
                 total - resident, total);
      if (crest == 0)
        {
          free_all (live, nlive);   /* the second crest takes their places as well */
          nlive = 0;
        }
    }
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (resident > total / 8 && g_get_monotonic_time () < deadline)
    {
      tick_for (1, 5);
      resident = resident_of (drop, DROP_BLOCKS, DROP_BLOCK, &total);
    }
  free_all (live, nlive);
  if (resident > total / 8)
    g_error ("%zu of %zu pages of a large crest freed 10 s ago are still resident", resident, total);
}

/* A thread that starts adopts an exited thread's heap without its high:
 * the slabs the exited thread had in runs at its crest go back once the
 * adopter has left them idle for a period or two, not two epochs later
 * (the adopter's needs are its own: churn_threads kept 170 KiB more). */
/* Fills swing[] (a crest the heap's clock samples, 5 ms periods), then
 * frees it all. */
static void
crest_then_free (int byte)
{
  ht_alloc_filled (swing, SWING_BLOCKS, SWING_BLOCK, byte);
  tick_for (4, 5);
  free_all (swing, SWING_BLOCKS);
}

static void *
crest_and_exit (void *arg)
{
  (void) arg;
  crest_then_free (0x17);
  return NULL;
}

static void *
adopt_and_tick (void *arg)
{
  size_t *left = arg, total;
  tick_for (40, 5);   /* fewer ticks than one epoch of the high (64) */
  *left = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
  return NULL;
}

static void
test_adopted_heap_forgets_high (void)
{
  if (!ht_in_process_with_decay ("5"))
    return;
  size_t total, left = exit_then_adopt (crest_and_exit, adopt_and_tick);
  resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
  if (left > total / 8)
    g_error ("%zu of the %zu pages an exited thread freed are resident after 40 periods "
             "in the heap's next thread", left, total);
}

/* The high's epochs are counted in time: a heap ticks only on its misses,
 * and one that misses once every 8 periods kept its crest's free slabs
 * for 128 of its ticks (5 s here) when epochs were counted in ticks. Two
 * epochs are 640 ms at a 5 ms period. */
static void
test_rarely_missing_heap_forgets_high (void)
{
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!ht_in_process_with_decay ("5"))
    return;
  ht_keep_allocating ();
  crest_then_free (0x2C);
  size_t total, resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
  gint64 start = g_get_monotonic_time (), deadline = start + 3 * G_USEC_PER_SEC;
  while (resident > total / 8 && g_get_monotonic_time () < deadline)
    {
      tick_for (1, 40);
      resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
    }
  g_test_message ("%zu of %zu pages resident after %.2f s", resident, total,
                  (double) (g_get_monotonic_time () - start) / G_USEC_PER_SEC);
  if (resident > total / 8)
    g_error ("%zu of %zu pages freed 3 s ago are still resident in a heap that misses every 40 ms",
             resident, total);
}

/* A heap that had no miss for more than two epochs of its high (a thread
 * asleep) keeps nothing for its old crest when it wakes: its first tick
 * starts the epoch afresh. It kept the crest for one more epoch (1.28 s
 * at a 20 ms period). Here it must let go within 0.6 s of waking, but
 * for what its own bin of the class holds (2 MiB, 32 blocks) and its
 * current run of the class (a slab: one block). */
static void
test_woken_heap_forgets_high (void)
{
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!ht_in_process_with_decay ("20"))
    return;
  const size_t keep = 34 * SWING_BLOCK / (size_t) sysconf (_SC_PAGESIZE);
  ht_keep_allocating ();
  ht_alloc_filled (swing, SWING_BLOCKS, SWING_BLOCK, 0x6B);
  tick_for (4, 20);
  free_all (swing, SWING_BLOCKS);
  g_usleep (3 * G_USEC_PER_SEC);   /* two epochs are 2.56 s */
  size_t total, resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
  g_assert_cmpuint (resident, >, keep);   /* nobody ticked meanwhile */
  gint64 start = g_get_monotonic_time (), deadline = start + G_USEC_PER_SEC * 6 / 10;
  while (resident > keep && g_get_monotonic_time () < deadline)
    {
      tick_for (1, 20);
      resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
    }
  g_test_message ("%zu of %zu pages resident %.2f s after waking", resident, total,
                  (double) (g_get_monotonic_time () - start) / G_USEC_PER_SEC);
  if (resident > keep)
    g_error ("%zu of %zu pages freed before a 3 s sleep still resident 0.6 s after waking",
             resident, total);
}

/* A thread that frees what it had at its crest and then sleeps (a worker
 * waiting on a queue) has no misses, so its heap's clock stops with the
 * slabs and empty SuperSlabs kept for its high: other heaps' ticks give
 * them back once it has been idle for a period; otherwise they stay
 * resident for as long as the thread sleeps. What its
 * own cache holds stays with it (2 MiB of this class, 512 pages: no other
 * thread may touch a thread's bins). */
static ht_stage sleeper = HT_STAGE_INIT;   /* 1: freed, sleeping; 2: may exit */

static void *
crest_free_and_sleep (void *arg)
{
  (void) arg;
  crest_then_free (0x29);
  ht_stage_set (&sleeper, 1);
  ht_stage_wait (&sleeper, 2);
  return NULL;
}

static void
test_sleeping_thread_heap_returned (void)
{
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!ht_in_process_with_decay ("5"))
    return;
  ht_keep_allocating ();
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, crest_free_and_sleep, NULL), ==, 0);
  ht_stage_wait (&sleeper, 1);
  size_t total, resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
  g_test_message ("%zu of %zu freed pages resident as the thread goes to sleep", resident, total);
  gint64 deadline = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  while (resident > total / 4 && g_get_monotonic_time () < deadline)
    {
      tick_for (1, 5);
      resident = resident_of (swing, SWING_BLOCKS, SWING_BLOCK, &total);
    }
  g_test_message ("%zu of %zu freed pages resident at the end", resident, total);
  ht_stage_set (&sleeper, 2);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  if (resident > total / 4)
    g_error ("%zu of the %zu pages a sleeping thread freed are resident after 5 s of other "
             "threads' ticks", resident, total);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/decay/freed-memory-returned", test_freed_memory_returned);
  g_test_add_func ("/decay/off-keeps-cache", test_decay_off_keeps_cache);
  g_test_add_func ("/decay/large-drop-returned-at-once", test_large_drop_returned_at_once);
  g_test_add_func ("/decay/drop-returned-in-batches", test_drop_returned_in_batches);
  g_test_add_func ("/decay/idle-cache-returned", test_idle_cache_returned);
  g_test_add_func ("/decay/bound-follows-purges", test_bound_follows_purges);
  g_test_add_func ("/decay/kept-runs-released", test_kept_runs_released);
  g_test_add_func ("/decay/orphan-free-slabs-purged", test_orphan_free_slabs_purged);
  g_test_add_func ("/decay/spare-heap-left-out-of-use", test_spare_heap_left_out_of_use);
  g_test_add_func ("/decay/swinging-heap-keeps-slabs", test_swinging_heap_keeps_slabs);
  g_test_add_func ("/decay/shrunk-heap-returns-slabs", test_shrunk_heap_returns_slabs);
  g_test_add_func ("/decay/large-swing-kept-then-returned", test_large_swing_kept_then_returned);
  g_test_add_func ("/decay/adopted-heap-forgets-high", test_adopted_heap_forgets_high);
  g_test_add_func ("/decay/rarely-missing-heap-forgets-high", test_rarely_missing_heap_forgets_high);
  g_test_add_func ("/decay/woken-heap-forgets-high", test_woken_heap_forgets_high);
  g_test_add_func ("/decay/sleeping-thread-heap-returned", test_sleeping_thread_heap_returned);
  return g_test_run ();
}
