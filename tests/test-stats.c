/* hak_stats_get: the versioned struct's size contract, totals that agree
 * with the per-class and per-heap figures, and a thread's heap seen before
 * and after the thread exits. The cases that count run in a fresh process
 * so that what they see is their own. */
#include "hakmem-test.h"

#include <stdatomic.h>
#include <stddef.h>

enum { FILL = 0xA5 };

/* The whole struct, and more room than this library knows of: it fills
 * its struct, zeroes the rest, and says how much it filled. */
static void
test_full_and_larger_size (void)
{
  size_t room = sizeof (struct hak_stats) + 256;
  unsigned char *buf = g_malloc (room);
  memset (buf, FILL, room);
  g_assert_cmpint (hak_stats_get ((struct hak_stats *) buf, room), ==, (int) sizeof (struct hak_stats));
  struct hak_stats *s = (struct hak_stats *) buf;
  g_assert_cmpuint (s->version, ==, HAK_STATS_VERSION);
  g_assert_cmpuint (s->size, ==, sizeof (struct hak_stats));
  g_assert_true (ht_all_bytes (buf + sizeof (struct hak_stats), room - sizeof (struct hak_stats), 0));
  g_assert_cmpuint (s->nclasses, >, 1);
  g_assert_cmpuint (s->nclasses, <=, HAK_STATS_MAX_CLASSES);
  g_assert_cmpuint (s->classes[0].size, ==, 0);   /* class 0 is no class */
  g_assert_cmpuint (s->heaps_listed, <=, HAK_STATS_MAX_HEAPS);
  g_free (buf);
}

/* A smaller struct (a program built against an older header) gets exactly
 * the bytes it asked for; the bytes past them stay as they were. */
static void
test_smaller_size_fills_only_that (void)
{
  const size_t sizes[] = { 1, 4, 8, 12, offsetof (struct hak_stats, bytes_out) + 8,
                           offsetof (struct hak_stats, classes), offsetof (struct hak_stats, heap),
                           sizeof (struct hak_stats) - 1 };
  size_t room = sizeof (struct hak_stats) + 64;
  unsigned char *buf = g_malloc (room);
  for (size_t k = 0; k < G_N_ELEMENTS (sizes); k++)
    {
      size_t size = sizes[k];
      memset (buf, FILL, room);
      g_assert_cmpint (hak_stats_get ((struct hak_stats *) buf, size), ==, (int) size);
      if (!ht_all_bytes (buf + size, room - size, FILL))
        g_error ("hak_stats_get wrote past the %zu bytes it was given", size);
      if (size >= 4)
        {
          uint32_t version;
          memcpy (&version, buf, sizeof version);
          g_assert_cmpuint (version, ==, HAK_STATS_VERSION);
        }
      if (size >= 8)
        {
          uint32_t filled;
          memcpy (&filled, buf + offsetof (struct hak_stats, size), sizeof filled);
          g_assert_cmpuint (filled, ==, size);
        }
    }
  g_free (buf);
}

/* The first fields, as an older program would declare them: the same
 * figures as the whole struct's. */
struct old_stats
{
  uint32_t version, size;
  uint64_t heaps;
};

static void
test_older_struct_reads_its_fields (void)
{
  if (!ht_in_fresh_process ())
    return;
  void *p = T (malloc) (100);   /* one heap at least */
  g_assert_nonnull (p);
  struct old_stats old;
  g_assert_cmpint (hak_stats_get ((struct hak_stats *) &old, sizeof old), ==, (int) sizeof old);
  g_assert_cmpuint (old.version, ==, HAK_STATS_VERSION);
  g_assert_cmpuint (old.size, ==, sizeof old);
  g_assert_cmpuint (old.heaps, ==, 1);
  g_assert_cmpuint (old.heaps, ==, ht_stats ().heaps);
  T (free) (p);
}

/* NULL or size 0: -1 with errno EINVAL, nothing written. */
static void
test_null_and_zero_rejected (void)
{
  struct hak_stats s;
  memset (&s, FILL, sizeof s);
  errno = 0;
  g_assert_cmpint (hak_stats_get (NULL, sizeof s), ==, -1);
  g_assert_cmpint (errno, ==, EINVAL);
  errno = 0;
  g_assert_cmpint (hak_stats_get (&s, 0), ==, -1);
  g_assert_cmpint (errno, ==, EINVAL);
  g_assert_true (ht_all_bytes (&s, sizeof s, FILL));
}

/* The class of blocks of `size` bytes by the stats' class sizes: the one
 * whose size malloc_usable_size reports for such a block. */
static uint32_t
class_of_size (const struct hak_stats *s, size_t size)
{
  void *p = T (malloc) (size);
  size_t usable = T (malloc_usable_size) (p);
  T (free) (p);
  for (uint32_t c = 1; c < s->nclasses; c++)
    if (s->classes[c].size == usable)
      return c;
  g_error ("no class of %zu bytes (blocks of %zu)", usable, size);
}

enum { MIXED = 3000 };
static void *mixed[MIXED];

/* Sums over classes and over heaps are the totals (one snapshot), and the
 * classes' sizes are the block sizes malloc hands out. */
static void
check_totals (const struct hak_stats *s)
{
  uint64_t refills = 0, heap_refills = 0, made = 0, freed = 0, bytes = 0, blocks = 0, carved = 0;
  for (uint32_t c = 0; c < s->nclasses; c++)
    {
      refills += s->classes[c].refills;
      carved += s->classes[c].carved_blocks;
      if (c > 0)
        g_assert_cmpuint (s->classes[c].size, >, 0);
    }
  g_assert_cmpuint (s->heaps_listed, ==, MIN (s->heaps, (uint64_t) HAK_STATS_MAX_HEAPS));
  for (uint32_t h = 0; h < s->heaps_listed; h++)
    {
      const struct hak_stats_heap *e = &s->heap[h];
      g_assert_cmpuint (e->id, ==, h + 1);
      heap_refills += e->refills;
      made += e->runs_made;
      freed += e->runs_freed;
      bytes += e->bytes_out;
      blocks += e->blocks_out;
      g_assert_cmpuint (e->bytes_out, >=, e->blocks_out * 16);
    }
  g_assert_cmpuint (refills, ==, s->refills);
  g_assert_cmpuint (heap_refills, ==, s->refills);
  g_assert_cmpuint (made, ==, s->runs_made);
  g_assert_cmpuint (freed, ==, s->runs_freed);
  g_assert_cmpuint (bytes, ==, s->bytes_out);
  /* every block out was carved once (borrowed or lent ones included) */
  g_assert_cmpuint (blocks, <=, carved);
  g_assert_cmpuint (s->runs_made, >=, s->runs_freed);
  g_assert_cmpuint (s->ss_acquired, >=, s->ss_released);
  g_assert_cmpuint (s->superslab_bytes, >, 0);
}

static void
test_totals_agree (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  if (!ht_in_fresh_process ())
    return;
  uint64_t state = 7;
  size_t asked[4];
  for (size_t i = 0; i < MIXED; i++)
    {
      size_t size = 16 + ht_rand (&state) % 4000;
      if (i < G_N_ELEMENTS (asked))
        asked[i] = size;
      mixed[i] = T (malloc) (size);
      g_assert_nonnull (mixed[i]);
    }
  struct hak_stats s = ht_stats ();
  check_totals (&s);
  g_assert_cmpuint (s.heaps, ==, 1);
  g_assert_cmpuint (s.heap[0].blocks_out, >=, MIXED);
  g_assert_cmpuint (s.heap[0].thread_exited, ==, 0);
  g_assert_cmpuint (s.heap[0].superslabs, >=, 1);
  g_assert_cmpuint (s.ss_live, >=, s.heap[0].superslabs);
  /* the class a request refills is at most the block's: a block of a
   * larger class may stand in for it (its usable size is then larger) */
  for (size_t i = 0; i < G_N_ELEMENTS (asked); i++)
    {
      uint32_t top = class_of_size (&s, asked[i]);
      uint64_t refills = 0;
      for (uint32_t c = 1; c <= top; c++)
        if (s.classes[c].size >= asked[i])
          refills += s.classes[c].refills;
      g_assert_cmpuint (refills, >, 0);
    }
  void *large = T (malloc) (4 * HT_MiB);
  g_assert_nonnull (large);
  s = ht_stats ();
  check_totals (&s);
  g_assert_cmpuint (s.large_live_spans, >=, 1);
  g_assert_cmpuint (s.large_live_bytes, >=, 4 * HT_MiB);
  T (free) (large);
  for (size_t i = 0; i < MIXED; i++)
    T (free) (mixed[i]);
  s = ht_stats ();
  check_totals (&s);
  g_assert_cmpuint (s.large_live_bytes, <, 4 * HT_MiB);
}

/* A thread that allocates N blocks of one class, and nothing else: its
 * heap shows them while it runs (its bin may hold more it carved), and
 * exactly them once it exited (its bins went back to its runs). When
 * another thread has freed them and malloc_trim took them back from the
 * exited thread's inbox, it shows none. A thread that starts then takes
 * the heap over. */
enum { OWN_BLOCKS = 1000, OWN_SIZE = 96 };
static void *own[OWN_BLOCKS];
static ht_stage own_stage = HT_STAGE_INIT;   /* 1: allocated; 2: may exit */

static void *
allocate_then_wait (void *arg)
{
  (void) arg;
  ht_alloc_filled (own, OWN_BLOCKS, OWN_SIZE, 0x3d);
  ht_stage_set (&own_stage, 1);
  ht_stage_wait (&own_stage, 2);
  return NULL;
}

static void *
allocate_one (void *arg)
{
  void *p = T (malloc) (OWN_SIZE);
  g_assert_nonnull (p);
  T (free) (p);
  *(struct hak_stats *) arg = ht_stats ();   /* while it owns the heap */
  return NULL;
}

static void
test_thread_heap_across_exit (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  if (!ht_in_fresh_process ())
    return;
  void *mine = T (malloc) (64);   /* the main thread's heap: heap 1 */
  g_assert_nonnull (mine);
  struct hak_stats s = ht_stats ();
  uint32_t cls = class_of_size (&s, OWN_SIZE);   /* allocates: the figures after it */
  s = ht_stats ();
  g_assert_cmpuint (s.classes[cls].size, ==, OWN_SIZE);
  uint64_t carved0 = s.classes[cls].carved_blocks, refills0 = s.classes[cls].refills;
  uint64_t remote0 = s.remote_blocks;
  g_assert_cmpuint (s.heaps, ==, 1);

  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, allocate_then_wait, NULL), ==, 0);
  ht_stage_wait (&own_stage, 1);
  s = ht_stats ();
  check_totals (&s);
  g_assert_cmpuint (s.heaps, ==, 2);
  const struct hak_stats_heap *h = &s.heap[1];
  g_test_message ("running: %llu blocks out, %llu refills",
                  (unsigned long long) h->blocks_out, (unsigned long long) h->refills);
  g_assert_cmpuint (h->id, ==, 2);
  g_assert_cmpuint (h->thread_exited, ==, 0);
  g_assert_cmpuint (h->blocks_out, >=, OWN_BLOCKS);
  g_assert_cmpuint (h->bytes_out, ==, h->blocks_out * OWN_SIZE);   /* one class only */
  g_assert_cmpuint (h->superslabs, >=, 1);
  g_assert_cmpuint (h->runs_made, >=, 1);
  g_assert_cmpuint (s.classes[cls].carved_blocks - carved0, >=, OWN_BLOCKS);
  g_assert_cmpuint (s.classes[cls].refills - refills0, ==, h->refills);

  ht_stage_set (&own_stage, 2);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  s = ht_stats ();
  check_totals (&s);
  g_assert_cmpuint (s.heaps, ==, 2);
  g_assert_cmpuint (h->thread_exited, ==, 1);
  g_assert_cmpuint (h->blocks_out, ==, OWN_BLOCKS);
  g_assert_cmpuint (h->bytes_out, ==, (uint64_t) OWN_BLOCKS * OWN_SIZE);
  uint64_t held = h->superslabs;
  g_assert_cmpuint (held, >=, 1);

  for (size_t i = 0; i < OWN_BLOCKS; i++)
    {
      g_assert_true (ht_all_bytes (own[i], OWN_SIZE, 0x3d));
      T (free) (own[i]);
    }
  g_assert_cmpint (T (malloc_trim) (0), ==, 1);
  s = ht_stats ();
  check_totals (&s);
  g_test_message ("after the frees and a trim: %llu blocks out, %llu SuperSlabs (%llu before)",
                  (unsigned long long) h->blocks_out, (unsigned long long) h->superslabs,
                  (unsigned long long) held);
  g_assert_cmpuint (s.heaps, ==, 2);
  g_assert_cmpuint (h->thread_exited, ==, 1);
  g_assert_cmpuint (h->blocks_out, ==, 0);
  g_assert_cmpuint (h->bytes_out, ==, 0);
  g_assert_cmpuint (h->superslabs, <, held);
  g_assert_cmpuint (s.remote_blocks - remote0, >=, OWN_BLOCKS);

  struct hak_stats during;
  g_assert_cmpint (pthread_create (&t, NULL, allocate_one, &during), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  g_assert_cmpuint (during.heaps, ==, 2);   /* adopted, not a new one */
  g_assert_cmpuint (during.heap[1].thread_exited, ==, 0);
  s = ht_stats ();
  g_assert_cmpuint (s.heaps, ==, 2);
  g_assert_cmpuint (s.heap[1].thread_exited, ==, 1);
  g_assert_cmpuint (s.heap[0].thread_exited, ==, 0);   /* the main thread's */
  T (free) (mine);
}

/* Lock waits: none while one thread runs alone (only an acquisition that
 * finds the lock held counts), some once threads contend. Threads that
 * start, take large and small blocks, free each other's and exit contend
 * for the heap list, the large cache, the metadata region and heaps, under
 * every box; they run until some wait is counted, or fail after many
 * rounds. Counts only: how long a wait lasts depends on the machine. */
enum { LW_THREADS = 8, LW_ROUNDS = 4000 };
static _Atomic(void *) lw_slots[64];

static void *
lw_worker (void *arg)
{
  uint64_t state = (uintptr_t) arg;
  for (int i = 0; i < 200; i++)
    {
      size_t size = (i & 7) == 0 ? 300 * HT_KiB + ht_rand (&state) % HT_MiB
                                 : 16 + ht_rand (&state) % 2000;
      void *p = T (malloc) (size);
      g_assert_nonnull (p);
      memset (p, 0x5a, 16);   /* the smallest size asked */
      p = atomic_exchange (&lw_slots[ht_rand (&state) % G_N_ELEMENTS (lw_slots)], p);
      T (free) (p);   /* most likely another thread's */
    }
  return NULL;
}

static uint64_t
lock_waits (const struct hak_stats *s)
{
  uint64_t n = 0;
  for (uint32_t k = 0; k < s->nlock_kinds; k++)
    {
      const struct hak_stats_lock *l = &s->locks[k];
      if (l->waits == 0)   /* nothing is counted but for a wait */
        {
          g_assert_cmpuint (l->spins, ==, 0);
          g_assert_cmpuint (l->yields, ==, 0);
          g_assert_cmpuint (l->wait_ns, ==, 0);
          g_assert_cmpuint (l->max_wait_ns, ==, 0);
        }
      g_assert_cmpuint (l->max_wait_ns, <=, l->wait_ns);
      n += l->waits;
    }
  return n;
}

static void
test_lock_waits (void)
{
  if (!ht_in_fresh_process ())
    return;
  struct hak_stats s = ht_stats ();
  g_assert_cmpuint (s.nlock_kinds, ==, HAK_STATS_LOCK_KINDS);
  g_assert_cmpuint (s.nlock_kinds, <=, HAK_STATS_MAX_LOCK_KINDS);
  /* alone: large and small blocks, a thread at a time */
  for (int r = 0; r < 20; r++)
    {
      pthread_t t;
      g_assert_cmpint (pthread_create (&t, NULL, lw_worker, (void *) (uintptr_t) (r + 1)), ==, 0);
      g_assert_cmpint (pthread_join (t, NULL), ==, 0);
    }
  s = ht_stats ();
  g_assert_cmpuint (lock_waits (&s), ==, 0);

  int rounds = 0;
  for (; rounds < LW_ROUNDS && lock_waits (&s) == 0; rounds++)
    {
      pthread_t t[LW_THREADS];
      for (int i = 0; i < LW_THREADS; i++)
        g_assert_cmpint (pthread_create (&t[i], NULL, lw_worker,
                                         (void *) (uintptr_t) (rounds * LW_THREADS + i + 100)),
                         ==, 0);
      for (int i = 0; i < LW_THREADS; i++)
        g_assert_cmpint (pthread_join (t[i], NULL), ==, 0);
      s = ht_stats ();
    }
  for (uint32_t k = 0; k < s.nlock_kinds; k++)
    g_test_message ("lock kind %u: %llu waits, %llu spins, %llu yields", k,
                    (unsigned long long) s.locks[k].waits, (unsigned long long) s.locks[k].spins,
                    (unsigned long long) s.locks[k].yields);
  g_test_message ("waits seen after %d rounds of %d threads", rounds, LW_THREADS);
  g_assert_cmpuint (lock_waits (&s), >, 0);
  for (size_t i = 0; i < G_N_ELEMENTS (lw_slots); i++)
    T (free) (atomic_exchange (&lw_slots[i], NULL));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/stats/full-and-larger-size", test_full_and_larger_size);
  g_test_add_func ("/stats/smaller-size-fills-only-that", test_smaller_size_fills_only_that);
  g_test_add_func ("/stats/older-struct-reads-its-fields", test_older_struct_reads_its_fields);
  g_test_add_func ("/stats/null-and-zero-rejected", test_null_and_zero_rejected);
  g_test_add_func ("/stats/totals-agree", test_totals_agree);
  g_test_add_func ("/stats/thread-heap-across-exit", test_thread_heap_across_exit);
  g_test_add_func ("/stats/lock-waits", test_lock_waits);
  return g_test_run ();
}
