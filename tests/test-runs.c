/* A run of a tiny class left with no block out stays with its class
 * (HAK_EMPTY_KEEP_SLABS slabs of them a heap, backend/heap_int.h): a program
 * whose queue of blocks drains and fills again finds its own carved blocks
 * at the next crest instead of new runs; past the bound, emptied runs go
 * back to their SuperSlabs as before. Each case runs in a thread of its
 * own (whose heap holds only the case's blocks) in a fresh process, most
 * with HAKMEM_DECAY_MS=60000, so that no decay tick (which releases the
 * kept runs its heap's recent high does not cover) comes during them. */
#include "hakmem-test.h"

#include <pthread.h>

/* 1,000-byte requests take the 1,040-byte class: 63 blocks a 64 KiB slab,
 * one slab a run. */
enum { SIZE = 1000, PER_RUN = 63, KEEP_SLABS = 8, MANY_RUNS = 20 };
static void *blocks[MANY_RUNS * PER_RUN];

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

/* body runs in a new thread of such a process. */
static void
in_thread_of_fresh_process (const char *decay_ms, void *(*body) (void *))
{
  if (!in_fresh_process (decay_ms))
    return;
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, body, NULL), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
}

static unsigned long long
runs_made (void)
{
  return ht_stats ().runs_made;
}

static unsigned long long
runs_freed (void)
{
  return ht_stats ().runs_freed;
}

static void
alloc_runs (size_t runs)
{
  ht_alloc_filled (blocks, runs * PER_RUN, SIZE, 0x5A);
}

static void
free_runs (size_t runs)
{
  for (size_t i = 0; i < runs * PER_RUN; i++)
    T (free) (blocks[i]);
}

/* Three runs filled and emptied keep their slabs: none goes back, and
 * filling them again makes no new run. */
static void *
refill_same_runs (void *arg)
{
  (void) arg;
  alloc_runs (3);
  unsigned long long made = runs_made (), freed = runs_freed ();
  free_runs (3);
  g_assert_cmpuint (runs_freed (), ==, freed);
  alloc_runs (3);
  g_assert_cmpuint (runs_made (), ==, made);
  free_runs (3);
  return NULL;
}

static void
test_emptied_runs_stay_with_class (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  in_thread_of_fresh_process ("60000", refill_same_runs);
}

/* Twenty runs emptied: eight stay, every other one that empties (all but
 * the class's current run and the one or two the thread's bin still holds
 * blocks of) goes back. */
static void *
empty_many_runs (void *arg)
{
  (void) arg;
  alloc_runs (MANY_RUNS);
  unsigned long long freed = runs_freed ();
  free_runs (MANY_RUNS);
  unsigned long long released = runs_freed () - freed;
  g_assert_cmpuint (released, <=, MANY_RUNS - KEEP_SLABS);
  g_assert_cmpuint (released, >=, MANY_RUNS - KEEP_SLABS - 3);
  return NULL;
}

static void
test_emptied_runs_kept_within_bound (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  in_thread_of_fresh_process ("60000", empty_many_runs);
}

/* With the clock off nothing would ever give kept runs back: an emptied
 * run goes back at once, as it did before runs were kept. Of six, the
 * class's current one stays, and so may one or two whose blocks the
 * thread's bin still holds (a full bin flushes the blocks freed last and
 * keeps older ones). */
static void *
empty_runs_clock_off (void *arg)
{
  (void) arg;
  alloc_runs (6);
  unsigned long long freed = runs_freed ();
  free_runs (6);
  g_assert_cmpuint (runs_freed () - freed, >=, 3);
  return NULL;
}

static void
test_clock_off_keeps_no_run (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  in_thread_of_fresh_process ("0", empty_runs_clock_off);
}

/* Kept runs last only as long as the heap's recent high covers them: a
 * heap that stays smaller gives them back (within two epochs of 64 decay
 * periods, HAKMEM_DECAY_MS=1 here; sooner when the ticks, which sample the
 * high, never saw the runs in use), all but the slack its high keeps (a
 * sixteenth). Six runs emptied: the class's current one stays, the
 * thread's bin may hold blocks of one more until its idle trim, one may be
 * the slack. The thread keeps missing in another class, so that its clock
 * ticks. Fails if kept runs never go back. */
enum { CHURN = 1024 };   /* 48 KiB: more than a bin of the class holds (32 KiB), so every round misses */
static void *churn[CHURN];

/* Misses in a class of 48-byte blocks, so that the calling thread's clock
 * ticks, until `want` runs went back since the count was `freed`, or 5 s
 * passed; returns how many did. */
static unsigned long long
tick_until_released (unsigned long long freed, unsigned long long want)
{
  gint64 until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  while (runs_freed () - freed < want && g_get_monotonic_time () < until)
    {
      ht_alloc_filled (churn, CHURN, 48, 0x11);
      for (size_t i = 0; i < CHURN; i++)
        T (free) (churn[i]);
      g_usleep (1000);
    }
  return runs_freed () - freed;
}

static void *
kept_runs_go_back (void *arg)
{
  (void) arg;
  alloc_runs (6);
  unsigned long long freed = runs_freed ();
  free_runs (6);
  g_assert_cmpuint (tick_until_released (freed, 3), >=, 3);
  return NULL;
}

static void
test_kept_runs_go_back_when_heap_stays_smaller (void)
{
  in_thread_of_fresh_process ("1", kept_runs_go_back);
}

/* A thread that empties runs and then sleeps has no clock of its own
 * running: other threads' ticks give back the runs it kept for their
 * classes (decay_idle_heap, heap_decay.c), as they purge its free slabs.
 * HAKMEM_DECAY_MS=1; the main thread keeps missing, so that its clock
 * ticks. Six runs emptied: all but the current one and the one or two
 * the sleeper's bin still holds blocks of go back (with no bins,
 * HAKMEM_FRONT=none, every free is a miss, and the sleeper's own ticks
 * may give some back before it sleeps). */
static ht_stage sleeper = HT_STAGE_INIT;   /* 1: runs emptied; 2: may exit */

static unsigned long long sleeper_freed;   /* runs freed before its frees */

static void *
empty_runs_then_sleep (void *arg)
{
  (void) arg;
  alloc_runs (6);
  sleeper_freed = runs_freed ();
  free_runs (6);
  ht_stage_set (&sleeper, 1);
  ht_stage_wait (&sleeper, 2);
  return NULL;
}

static void
test_sleeping_thread_kept_runs_go_back (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (!in_fresh_process ("1"))
    return;
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, empty_runs_then_sleep, NULL), ==, 0);
  ht_stage_wait (&sleeper, 1);
  unsigned long long released = tick_until_released (sleeper_freed, 3);
  ht_stage_set (&sleeper, 2);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  g_assert_cmpuint (released, >=, 3);
}

/* Blocks of 8-32 KiB (mid classes, a few blocks a run) replaced at random
 * in 64 slots: once the slots are filled, the classes' runs serve every
 * request. With no bins to keep such blocks (the hardened box), an
 * emptied mid run that went back to its SuperSlab at once was made anew
 * at the next refill of its class, a few hundred times here. */
enum { MID_SLOTS = 64, MID_PAIRS = 20000, MID_RUNS_MADE_MAX = 32 };

static void *
replace_mid_blocks (void *arg)
{
  (void) arg;
  static void *slot[MID_SLOTS];
  uint64_t x = 42;
  for (size_t i = 0; i < MID_SLOTS; i++)
    slot[i] = T (malloc) (8192);
  unsigned long long made = 0;
  for (size_t i = 0; i < 2 * MID_PAIRS; i++)
    {
      if (i == MID_PAIRS)   /* the first half finds the classes' runs */
        made = runs_made ();
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      size_t k = (size_t) (x >> 58) % MID_SLOTS;
      T (free) (slot[k]);
      slot[k] = T (malloc) (8192 + (size_t) ((x >> 20) % (24 * 1024 + 1)));
      g_assert_nonnull (slot[k]);
      memset (slot[k], 0x3C, 64);
    }
  unsigned long long more = runs_made () - made;
  g_test_message ("%llu runs made in %d replacements", more, MID_PAIRS);
  g_assert_cmpuint (more, <=, MID_RUNS_MADE_MAX);
  for (size_t i = 0; i < MID_SLOTS; i++)
    T (free) (slot[i]);
  return NULL;
}

static void
test_mid_runs_not_made_again (void)
{
  const char *pool = g_getenv ("HAKMEM_POOL");
  if (!ht_safety_hardened () && (!HT_POOL_ENABLED || (pool && strcmp (pool, "none") == 0)))
    {
      g_test_skip ("HAKMEM_POOL=none gives emptied mid runs back to their SuperSlab at once");
      return;
    }
  in_thread_of_fresh_process ("60000", replace_mid_blocks);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/runs/emptied-runs-stay-with-class", test_emptied_runs_stay_with_class);
  g_test_add_func ("/runs/emptied-runs-kept-within-bound", test_emptied_runs_kept_within_bound);
  g_test_add_func ("/runs/clock-off-keeps-no-run", test_clock_off_keeps_no_run);
  g_test_add_func ("/runs/kept-runs-go-back-when-heap-stays-smaller",
                   test_kept_runs_go_back_when_heap_stays_smaller);
  g_test_add_func ("/runs/sleeping-thread-kept-runs-go-back", test_sleeping_thread_kept_runs_go_back);
  g_test_add_func ("/runs/mid-runs-not-made-again", test_mid_runs_not_made_again);
  return g_test_run ();
}
