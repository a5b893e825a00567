/* Refills and flushes between a thread's bins and its heap
 * (front/batch.c, backend/heap_refill.c, backend/heap_flush.c): an empty
 * bin takes its class's run's whole free list at once and shrinks back
 * to its size afterwards; a flush of blocks freed in another order than
 * they were allocated (each one a run of its own) gives runs back as they
 * empty and sends other heaps' blocks to their owners. Each case runs in
 * a fresh process (its own heaps), in threads of its own. */
#include "hakmem-test.h"

#include <pthread.h>

/* 48-byte blocks: 1,365 a 64 KiB slab, one slab a run; a bin of the
 * class holds at most 256 of them (front/tcache.c). */
enum { SMALL = 48, BIN_MAX = 256, IN_RUN = 1000 };
static void *blocks[2 * IN_RUN];

/* TRUE in a fresh process whose allocator read HAKMEM_DECAY_MS=decay_ms
 * at start-up; in the test's own process, starts it, checks that it
 * passed and returns FALSE. */
static gboolean
in_fresh_process (const char *decay_ms)
{
  if (g_test_subprocess ())
    return TRUE;
  g_setenv ("HAKMEM_DECAY_MS", decay_ms, TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  return FALSE;
}

static void
run_in_thread (void *(*body) (void *), void *arg)
{
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, body, arg), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
}

/* Frees b[0..n) in a random order. */
static void
free_shuffled (void **b, size_t n, uint64_t seed)
{
  for (size_t i = n; i > 1; i--)
    {
      size_t k = (size_t) (ht_rand (&seed) % i);
      void *t = b[i - 1];
      b[i - 1] = b[k];
      b[k] = t;
    }
  for (size_t i = 0; i < n; i++)
    T (free) (b[i]);
}

/* Allocates blocks into b[] from index *n on, one at a time, until a
 * malloc misses (a refill); returns how many blocks that refill brought. */
static unsigned long long
alloc_until_refill (void **b, size_t *n)
{
  struct hak_stats before = ht_stats (), now;
  do
    {
      b[*n] = T (malloc) (SMALL);
      g_assert_nonnull (b[*n]);
      memset (b[*n], 0x21, SMALL);
      (*n)++;
      now = ht_stats ();
    }
  while (now.refills == before.refills && *n < 2 * IN_RUN);
  g_assert_cmpuint (now.refills, ==, before.refills + 1);
  return now.refilled_blocks - before.refilled_blocks;
}

/* A thousand blocks of one run freed in a random order: the run's free
 * list holds most of them, in no address order. Once the bin's own blocks
 * are handed out, one refill brings the whole list, more than the bin
 * holds (cutting a part of it off would follow a link a block), and the
 * next mallocs find them all in the bin. Then every block freed: the bin,
 * grown to hold the list, is back to its size, so it keeps at most
 * BIN_MAX blocks out of their run (without that it would keep half of
 * the list). */
static void *
whole_list_then_shrink (void *arg)
{
  (void) arg;
  ht_alloc_filled (blocks, IN_RUN, SMALL, 0x21);
  free_shuffled (blocks, IN_RUN, 42);
  size_t n = 0;
  unsigned long long got = alloc_until_refill (blocks, &n);
  g_test_message ("%zu blocks from the bin, then one refill of %llu", n - 1, got);
  g_assert_cmpuint (got, >, BIN_MAX);
  unsigned long long refills = ht_stats ().refills;
  for (unsigned long long i = 1; i < got; i++)
    {
      blocks[n] = T (malloc) (SMALL);
      g_assert_nonnull (blocks[n]);
      memset (blocks[n++], 0x21, SMALL);
    }
  g_assert_cmpuint (ht_stats ().refills, ==, refills);
  HtRange *r = g_new (HtRange, n);
  for (size_t i = 0; i < n; i++)
    {
      g_assert_true (ht_all_bytes (blocks[i], SMALL, 0x21));
      r[i] = (HtRange) { (uintptr_t) blocks[i], (uintptr_t) blocks[i] + SMALL };
    }
  ht_assert_disjoint (r, n);
  g_free (r);
  /* what is out but these blocks (the test's own allocations) */
  unsigned long long out = ht_stats ().bytes_out - (unsigned long long) n * SMALL;
  free_shuffled (blocks, n, 7);
  unsigned long long left = ht_stats ().bytes_out - out;
  g_test_message ("%llu bytes left out of their run", left);
  g_assert_cmpuint (left, <=, (unsigned long long) BIN_MAX * SMALL);
  return NULL;
}

static void
test_refill_takes_whole_list (void)
{
  if (!ht_front_bins_or_skip ("no front cache box: no bin to refill"))
    return;
  if (in_fresh_process ("60000"))
    run_in_thread (whole_list_then_shrink, NULL);
}

/* A thread that has just started has small bins (they double at each
 * refill, front/front.h): one that adopts the heap of a thread that
 * freed a thousand blocks of a run takes only a few of them at its first
 * miss, not the run's whole list (at most 8 times its bin's size). */
static void *
alloc_and_free_run (void *arg)
{
  (void) arg;
  ht_alloc_filled (blocks, IN_RUN, SMALL, 0x21);
  free_shuffled (blocks, IN_RUN, 5);
  return NULL;
}

static void *
first_refill_is_small (void *arg)
{
  (void) arg;
  size_t n = 0;
  unsigned long long got = alloc_until_refill (blocks, &n);
  g_test_message ("first refill of the successor: %llu blocks", got);
  g_assert_cmpuint (n, ==, 1);
  g_assert_cmpuint (got, <=, 8 * 8);
  T (free) (blocks[0]);
  return NULL;
}

static void
test_small_bin_takes_part_of_list (void)
{
  if (!ht_front_bins_or_skip ("no front cache box: no bin to refill"))
    return;
  if (!in_fresh_process ("60000"))
    return;
  unsigned long long heaps = ht_stats ().heaps;   /* the main thread's, unless not interposed */
  run_in_thread (alloc_and_free_run, NULL);
  g_assert_cmpuint (ht_stats ().heaps, ==, heaps + 1);   /* the exited thread's heap waits */
  run_in_thread (first_refill_is_small, NULL);   /* and is adopted */
}

/* 1,000-byte blocks (63 a run of one slab) of 64 runs freed in a random
 * order: each flushed block is a stretch of its own, and the runs empty
 * one by one in the middle of flushes. With the clock off an emptied run
 * goes back at once: all but the class's current one and those whose
 * blocks the bin still holds (31 at most) must. */
enum { LARGE = 1000, PER_RUN = 63, RUNS = 64, LARGE_BIN_MAX = 31 };
static void *large_blocks[RUNS * PER_RUN];

static void *
scattered_frees_empty_runs (void *arg)
{
  (void) arg;
  ht_alloc_filled (large_blocks, RUNS * PER_RUN, LARGE, 0x5A);
  unsigned long long freed = ht_stats ().runs_freed;
  free_shuffled (large_blocks, RUNS * PER_RUN, 3);
  unsigned long long released = ht_stats ().runs_freed - freed;
  g_test_message ("%llu of %d runs went back", released, RUNS);
  g_assert_cmpuint (released, >=, RUNS - 1 - LARGE_BIN_MAX);
  return NULL;
}

static void
test_scattered_frees_empty_runs (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (in_fresh_process ("0"))
    run_in_thread (scattered_frees_empty_runs, NULL);
}

/* One thread frees its own blocks and another thread's, shuffled together,
 * so that its flushes mix both: every block of the other heap is sent to
 * it (counted once), and the owner, asking again, gets every one of them
 * back (past what its own bin still held); a block lost in the flush
 * would never come back, and the owner would carve new ones instead. */
enum { MIXED = 600 };
static void *owner_blocks[MIXED], *mixed[2 * MIXED];
static ht_stage owner_stage = HT_STAGE_INIT;   /* 1: allocated; 2: freed by the other */

/* The owner's blocks, also the first half of mixed[]. */
static void
owner_allocates (void)
{
  ht_alloc_filled (owner_blocks, MIXED, SMALL, 0x33);
  memcpy (mixed, owner_blocks, sizeof owner_blocks);
  ht_stage_set (&owner_stage, 1);
}

/* The owner asks again for more than it gave: AGAIN blocks into *again,
 * and the set of them. */
enum { AGAIN = MIXED + BIN_MAX + 256 };
static GHashTable *
owner_takes_again (void ***again)
{
  *again = g_new (void *, AGAIN);
  ht_alloc_filled (*again, AGAIN, SMALL, 0x44);
  GHashTable *got = g_hash_table_new (NULL, NULL);
  for (size_t i = 0; i < AGAIN; i++)
    g_hash_table_add (got, (*again)[i]);
  return got;
}

static void *
owner_thread (void *arg)
{
  (void) arg;
  owner_allocates ();
  ht_stage_wait (&owner_stage, 2);
  void **again;
  GHashTable *got = owner_takes_again (&again);
  for (size_t i = 0; i < MIXED; i++)
    g_assert_true (g_hash_table_contains (got, owner_blocks[i]));
  g_hash_table_destroy (got);
  for (size_t i = 0; i < AGAIN; i++)
    T (free) (again[i]);
  g_free (again);
  return NULL;
}

static void *
mixed_freer (void *arg)
{
  (void) arg;
  ht_alloc_filled (mixed + MIXED, MIXED, SMALL, 0x55);
  free_shuffled (mixed, 2 * MIXED, 11);
  return NULL;
}

/* The same blocks freed in allocation order, another heap's block after
 * every fourth own one: the own blocks of one slab that follow each other
 * in the bin go back to their run as the bin links them, a stretch ending
 * at each of the other heap's blocks. The owner then takes blocks again
 * (its own that came back among them), and the freer's next mallocs must
 * hand out none of those: a block of the other heap left on one of the
 * freer's runs would be handed out twice. */
static ht_stage order_stage = HT_STAGE_INIT;   /* 1: freed; 2: the owner holds blocks; 3: checked */
static GHashTable *owner_holds;

static void *
ordered_owner (void *arg)
{
  (void) arg;
  owner_allocates ();
  ht_stage_wait (&order_stage, 1);
  void **again;
  owner_holds = owner_takes_again (&again);
  size_t back = 0;
  for (size_t i = 0; i < MIXED; i++)
    back += g_hash_table_contains (owner_holds, owner_blocks[i]);
  g_test_message ("%zu of the owner's %d blocks came back to it", back, MIXED);
  g_assert_cmpuint (back, >, 0);
  ht_stage_set (&order_stage, 2);
  ht_stage_wait (&order_stage, 3);
  g_hash_table_destroy (owner_holds);
  for (size_t i = 0; i < AGAIN; i++)
    T (free) (again[i]);
  g_free (again);
  return NULL;
}

static void *
ordered_freer (void *arg)
{
  (void) arg;
  void **own = mixed + MIXED;
  ht_alloc_filled (own, MIXED, SMALL, 0x55);
  size_t other = 0;
  for (size_t i = 0; i < MIXED; i++)
    {
      T (free) (own[i]);
      if (i % 4 == 3)
        T (free) (mixed[other++]);
    }
  while (other < MIXED)
    T (free) (mixed[other++]);
  ht_stage_set (&order_stage, 1);
  ht_stage_wait (&order_stage, 2);
  enum { FREER_AGAIN = 2 * MIXED };
  void **again = g_new (void *, FREER_AGAIN);
  ht_alloc_filled (again, FREER_AGAIN, SMALL, 0x66);
  HtRange *r = g_new (HtRange, FREER_AGAIN);
  for (size_t i = 0; i < FREER_AGAIN; i++)
    {
      g_assert_false (g_hash_table_contains (owner_holds, again[i]));
      g_assert_true (ht_all_bytes (again[i], SMALL, 0x66));
      r[i] = (HtRange) { (uintptr_t) again[i], (uintptr_t) again[i] + SMALL };
    }
  ht_assert_disjoint (r, FREER_AGAIN);
  g_free (r);
  ht_stage_set (&order_stage, 3);
  for (size_t i = 0; i < FREER_AGAIN; i++)
    T (free) (again[i]);
  g_free (again);
  return NULL;
}

static void
test_ordered_flush_puts_stretches (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (!ht_front_bins_or_skip ("no front cache box: every free goes to the heap on its own"))
    return;
  if (!in_fresh_process ("60000"))
    return;
  pthread_t owner;
  g_assert_cmpint (pthread_create (&owner, NULL, ordered_owner, NULL), ==, 0);
  ht_stage_wait (&owner_stage, 1);
  run_in_thread (ordered_freer, NULL);
  g_assert_cmpint (pthread_join (owner, NULL), ==, 0);
}

static void
test_mixed_flush_sends_other_heaps_blocks (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (!ht_front_bins_or_skip ("no front cache box: every free goes to the heap on its own"))
    return;
  if (!in_fresh_process ("60000"))
    return;
  pthread_t owner;
  g_assert_cmpint (pthread_create (&owner, NULL, owner_thread, NULL), ==, 0);
  ht_stage_wait (&owner_stage, 1);
  unsigned long long remote = ht_stats ().remote_blocks;
  run_in_thread (mixed_freer, NULL);   /* its exit flushes what its bins kept */
  g_assert_cmpuint (ht_stats ().remote_blocks - remote, ==, MIXED);
  ht_stage_set (&owner_stage, 2);
  g_assert_cmpint (pthread_join (owner, NULL), ==, 0);
}

/* A thread that filled a bin of one class and then grows its heap with
 * another class gets that bin's blocks back in their runs at once, not a
 * decay period later (the clock is off here: HAKMEM_DECAY_MS=0): a bin
 * nobody popped since the heap's last step of growth (1 MiB more slabs in
 * runs, backend/heap_refill.c) is flushed at the next one (front/batch.c,
 * hak_cache_trim_idle). Three new SuperSlabs are 6 MiB of growth. */
enum { GROW_MAX = 64 * 1024, GROW_SS = 3 };
static void *kept[128];
static void *grown[GROW_MAX];
struct grow_case { size_t kept_size, kept_n, grow_size; };

static void *
fill_bin_then_grow (void *arg)
{
  const struct grow_case *c = arg;
  unsigned long long before = ht_stats ().bytes_out;
  ht_alloc_filled (kept, c->kept_n, c->kept_size, 0x5A);
  for (size_t i = 0; i < c->kept_n; i++)
    T (free) (kept[i]);
  struct hak_stats filled = ht_stats ();
  size_t block = ht_class_size (c->kept_size);
  unsigned long long cached = (filled.bytes_out - before) / block;   /* in the bin, out of their runs */
  g_assert_cmpuint (cached, >=, c->kept_n / 4);
  size_t n = 0;
  struct hak_stats now = filled;
  while (now.ss_acquired < filled.ss_acquired + GROW_SS && n < GROW_MAX)
    {
      grown[n] = T (malloc) (c->grow_size);
      g_assert_nonnull (grown[n]);
      memset (grown[n], 0x3C, c->grow_size);
      n++;
      now = ht_stats ();
    }
  g_assert_cmpuint (now.ss_acquired, >=, filled.ss_acquired + GROW_SS);
  g_test_message ("%llu blocks of %zu B cached; %zu blocks of %zu B later, %llu blocks of idle bins flushed",
                  cached, block, n, c->grow_size, (unsigned long long) (now.idle_bin_blocks - filled.idle_bin_blocks));
  g_assert_cmpuint (now.idle_bins - filled.idle_bins, >=, 1);
  g_assert_cmpuint (now.idle_bin_blocks - filled.idle_bin_blocks, >=, cached);
  for (size_t i = 0; i < n; i++)
    T (free) (grown[i]);
  return NULL;
}

static void
test_growth_flushes_idle_mid_bin (void)
{
  if (!ht_pool_bins_or_skip ("no Pool TLS box: 64 KiB blocks are not cached"))
    return;
  if (!in_fresh_process ("0"))
    return;
  struct grow_case c = { 64 * 1024, 32, 16 * 1024 };   /* 2 MiB cached, a mid bin's worth */
  run_in_thread (fill_bin_then_grow, &c);
}

static void
test_growth_flushes_idle_tiny_bin (void)
{
  if (!ht_front_bins_or_skip ("no front cache box: tiny blocks are not cached"))
    return;
  if (!in_fresh_process ("0"))
    return;
  struct grow_case c = { 256, 100, 512 };   /* about a tiny bin's 32 KiB */
  run_in_thread (fill_bin_then_grow, &c);
}

/* A thread's mid bins hold more than its share of what all threads' bins
 * may hold together (pool/tls.c: 32 MiB over the threads that own a heap,
 * 256 KiB at least): its misses send back the bins idle since the last
 * look. With 160 other threads alive the share is the floor, and the
 * bins of three classes (about 360 KiB) go back at the misses of a
 * fourth; with the thread alone they stay (the clock is off and the heap
 * grows by less than a step, so nothing else empties them). */
enum { SHARE_IDLE = 160, SHARE_KEPT = 12, SHARE_CYCLE = 200, SHARE_CYCLES = 12 };
static const size_t share_sizes[3] = { 8 * 1024, 10 * 1024, 12 * 1024 };
static void *share_blocks[3 * SHARE_KEPT + SHARE_CYCLE];
static ht_stage share_stage = HT_STAGE_INIT;

static void *
idle_heap_owner (void *arg)
{
  (void) arg;
  T (free) (T (malloc) (64));   /* the thread owns a heap from here */
  ht_stage_wait (&share_stage, 1);
  return NULL;
}

static void *
fill_bins_then_miss (void *arg)
{
  unsigned long long *flushed = arg;
  for (unsigned k = 0; k < 3; k++)
    ht_alloc_filled (share_blocks + k * SHARE_KEPT, SHARE_KEPT, share_sizes[k], 0x5A);
  for (unsigned i = 0; i < 3 * SHARE_KEPT; i++)
    T (free) (share_blocks[i]);
  struct hak_stats filled = ht_stats ();
  /* the misses of a smaller class (whose bin the larger ones do not
   * stand in for): more blocks than its bin holds, again and again; the
   * bins are looked at every few misses */
  void **miss = share_blocks + 3 * SHARE_KEPT;
  for (unsigned c = 0; c < SHARE_CYCLES; c++)
    {
      ht_alloc_filled (miss, SHARE_CYCLE, 1100, 0x3C);
      for (unsigned i = 0; i < SHARE_CYCLE; i++)
        T (free) (miss[i]);
    }
  *flushed = ht_stats ().idle_bin_blocks - filled.idle_bin_blocks;
  return NULL;
}

static unsigned long long
bins_flushed_with_others (unsigned others)
{
  pthread_t idle[SHARE_IDLE];
  g_assert_cmpuint (others, <=, SHARE_IDLE);
  /* this thread owns one too (under a sanitizer its own allocations may
   * not have come to hakmem) */
  T (free) (T (malloc) (64));
  unsigned long long before = ht_stats ().heaps;
  for (unsigned i = 0; i < others; i++)
    g_assert_cmpint (pthread_create (&idle[i], NULL, idle_heap_owner, NULL), ==, 0);
  unsigned long long flushed = 0;
  /* the idle threads own their heaps once their first free is done */
  while (ht_stats ().heaps < before + others)
    g_usleep (1000);
  run_in_thread (fill_bins_then_miss, &flushed);
  ht_stage_set (&share_stage, 1);
  for (unsigned i = 0; i < others; i++)
    g_assert_cmpint (pthread_join (idle[i], NULL), ==, 0);
  return flushed;
}

static void
test_mid_bins_over_share_flushed (void)
{
  if (!ht_pool_bins_or_skip ("no Pool TLS box: mid blocks are not cached"))
    return;
  if (!in_fresh_process ("0"))
    return;
  unsigned long long flushed = bins_flushed_with_others (SHARE_IDLE);
  g_test_message ("%llu blocks of idle bins flushed", flushed);
  g_assert_cmpuint (flushed, >=, 3 * SHARE_KEPT);
}

static void
test_mid_bins_within_share_kept (void)
{
  if (!ht_pool_bins_or_skip ("no Pool TLS box: mid blocks are not cached"))
    return;
  if (!in_fresh_process ("0"))
    return;
  g_assert_cmpuint (bins_flushed_with_others (0), ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/batch/refill-takes-whole-list", test_refill_takes_whole_list);
  g_test_add_func ("/batch/small-bin-takes-part-of-list", test_small_bin_takes_part_of_list);
  g_test_add_func ("/batch/scattered-frees-empty-runs", test_scattered_frees_empty_runs);
  g_test_add_func ("/batch/mixed-flush-sends-other-heaps-blocks", test_mixed_flush_sends_other_heaps_blocks);
  g_test_add_func ("/batch/ordered-flush-puts-stretches", test_ordered_flush_puts_stretches);
  g_test_add_func ("/batch/growth-flushes-idle-mid-bin", test_growth_flushes_idle_mid_bin);
  g_test_add_func ("/batch/growth-flushes-idle-tiny-bin", test_growth_flushes_idle_tiny_bin);
  g_test_add_func ("/batch/mid-bins-over-share-flushed", test_mid_bins_over_share_flushed);
  g_test_add_func ("/batch/mid-bins-within-share-kept", test_mid_bins_within_share_kept);
  return g_test_run ();
}
