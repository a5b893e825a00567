/* The decay clock when hak_os_clock_ms() (CLOCK_MONOTONIC_COARSE in
 * milliseconds, cut to 32 bits) is past 2^31: that is half of every
 * 49.7 days of a machine's uptime. Stamps compared as 32-bit differences
 * must never be left at 0, which then reads as 24 days in the future.
 *
 * This executable defines clock_gettime, so the allocator's calls land
 * here: with HT_CLOCK_START_MS set, the coarse clock starts at that value.
 * Each case runs in a fresh process with the clock and HAKMEM_DECAY_MS=10
 * set in its environment. */
#include "hakmem-test.h"
/* Under the hugepage SuperSlab box a SuperSlab that holds a run keeps
 * all its pages: the cases that count pages inside such SuperSlabs skip. */
#define PARTIAL_SKIP \
  "the hugepage SuperSlab box gives pages back only with whole SuperSlabs, and this counts pages inside SuperSlabs still in use"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <string.h>
#include <time.h>

static int64_t clock_shift_ms;
/* >= 0: the coarse clock stands still at this value (ms) */
static volatile int64_t clock_frozen_ms = -1;

int
clock_gettime (clockid_t id, struct timespec *ts)
{
  if (id == CLOCK_MONOTONIC_COARSE && clock_frozen_ms >= 0)
    {
      ts->tv_sec = clock_frozen_ms / 1000;
      ts->tv_nsec = (long) (clock_frozen_ms % 1000) * 1000000;
      return 0;
    }
  int r = (int) syscall (SYS_clock_gettime, id, ts);
  if (r == 0 && clock_shift_ms && id == CLOCK_MONOTONIC_COARSE)
    {
      int64_t ms = (int64_t) ts->tv_sec * 1000 + ts->tv_nsec / 1000000 + clock_shift_ms;
      ts->tv_sec = ms / 1000;
      ts->tv_nsec = (long) (ms % 1000) * 1000000 + ts->tv_nsec % 1000000;
    }
  return r;
}

/* Called before the first allocation of the case (the allocator reads the
 * clock on its first miss). */
static void
start_clock (void)
{
  const char *start = g_getenv ("HT_CLOCK_START_MS");
  g_assert_nonnull (start);
  struct timespec ts;
  g_assert_cmpint (syscall (SYS_clock_gettime, CLOCK_MONOTONIC_COARSE, &ts), ==, 0);
  clock_shift_ms = g_ascii_strtoll (start, NULL, 10) - ((int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
  g_assert_cmpint (clock_gettime (CLOCK_MONOTONIC_COARSE, &ts), ==, 0);
  g_test_message ("clock starts at %lld ms", (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static gboolean
in_process_at (const char *start_ms)
{
  if (g_test_subprocess ())
    {
      start_clock ();
      return TRUE;
    }
  g_setenv ("HT_CLOCK_START_MS", start_ms, TRUE);
  g_setenv ("HAKMEM_DECAY_MS", "10", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  return FALSE;
}

/* The SuperSlabs (2 MiB, aligned) the case's blocks were in; residency is
 * counted over them, not over the process (a sanitizer's shadow memory
 * would swamp it). The first 64 KiB of each, its header, stays. */
enum { SS = 2 * 1024 * 1024, SS_HEADER = 64 * 1024 };
static uintptr_t ss_seen[64];
static size_t nss;

static void
note_superslabs (void *const *b, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      uintptr_t base = (uintptr_t) b[i] & ~(uintptr_t) (SS - 1);
      size_t k = 0;
      while (k < nss && ss_seen[k] != base)
        k++;
      if (k == nss)
        {
          g_assert_cmpuint (nss, <, G_N_ELEMENTS (ss_seen));
          ss_seen[nss++] = base;
        }
    }
}

/* Resident pages past the headers of the noted SuperSlabs (unmapped ones
 * count as not resident); *total: all of those pages. */
static size_t
resident_pages (size_t *total)
{
  const size_t page = (size_t) sysconf (_SC_PAGESIZE), pages = (SS - SS_HEADER) / page;
  unsigned char *vec = g_malloc (pages);
  size_t resident = 0;
  *total = 0;
  for (size_t k = 0; k < nss; k++)
    {
      *total += pages;
      if (mincore ((void *) (ss_seen[k] + SS_HEADER), SS - SS_HEADER, vec) != 0)
        continue;
      for (size_t i = 0; i < pages; i++)
        resident += vec[i] & 1;
    }
  g_free (vec);
  return resident;
}

/* Keeps allocating until at most an eighth of those pages is resident or
 * 10 s have passed, then fails if more are. */
static void
assert_given_back (void)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  size_t total, resident = resident_pages (&total);
  g_assert_cmpuint (resident, >, total / 8);   /* written, freed, not given back yet */
  while (resident > total / 8 && g_get_monotonic_time () < deadline)
    {
      g_usleep (2000);
      ht_keep_allocating ();
      resident = resident_pages (&total);
    }
  g_test_message ("%zu of %zu pages resident", resident, total);
  if (resident > total / 8)
    g_error ("%zu of %zu pages of freed memory still resident 10 s after the frees (clock past 2^31)",
             resident, total);
}

enum { FILL = 24 * HT_MiB, SMALL = 256 };

/* A thread started after the clock passed 2^31 (its heap is made then)
 * fills 24 MiB and frees it all, then keeps allocating: its own ticks
 * must give the memory back. Such a heap never ticked when its stamps
 * started at 0 and a tick 24 days "ahead" counted as not due yet. */
static void *
fill_free_and_wait (void *arg)
{
  (void) arg;
  size_t n = FILL / SMALL;
  void **b = g_new (void *, n);
  ht_alloc_filled (b, n, SMALL, 0x5A);
  note_superslabs (b, n);
  for (size_t i = 0; i < n; i++)
    T (free) (b[i]);
  g_free (b);
  assert_given_back ();
  return NULL;
}

static void
test_new_heap_ticks (void)
{
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!in_process_at ("2200000000"))
    return;
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, fill_free_and_wait, NULL), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
}

/* The heap ticks; it then fills fresh SuperSlabs and frees all but one
 * block in each, so they stay in the heap with free slabs that only the
 * heap's own tick purges, once they stayed free for a period. A
 * SuperSlab stamped 0 never stayed free long enough. */
static void
test_fresh_superslabs_purged (void)
{
  if (!ht_partial_purge_or_skip (PARTIAL_SKIP))
    return;
  if (!in_process_at ("2200000000"))
    return;
  ht_keep_allocating ();
  size_t n = FILL / SMALL, per_ss = 2 * HT_MiB / SMALL;
  void **b = g_new (void *, n);
  ht_alloc_filled (b, n, SMALL, 0x3C);
  note_superslabs (b, n);
  for (size_t i = 0; i < n; i++)
    if (i % per_ss != 0)
      T (free) (b[i]);
  assert_given_back ();
  for (size_t i = 0; i < n; i += per_ss)
    {
      for (size_t k = 0; k < SMALL; k++)
        g_assert_cmpint (((unsigned char *) b[i])[k], ==, 0x3C);
      T (free) (b[i]);
    }
  g_free (b);
}

/* Whether a heap that wakes forgets its crest must depend on how long it
 * slept, not on where in its epoch (64 periods: 640 ms here) it fell
 * asleep. A thread's heap is born at t0 on a clock that moves only here;
 * it fills 12 MiB of 64 KiB blocks, ticks every period until `last` ms,
 * frees them, sleeps `sleep_ms` and ticks 5 times. */
typedef struct
{
  int64_t last, sleep_ms;
  size_t resident, total;
} Phase;

enum { CREST_BLOCKS = 192, CREST_BLOCK = 64 * 1024 };
static void *crest[CREST_BLOCKS];

static void *
crest_sleep_wake (void *arg)
{
  Phase *ph = arg;
  const int64_t t0 = clock_frozen_ms;
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);
  ht_keep_allocating ();
  for (size_t i = 0; i < CREST_BLOCKS; i++)
    memset (crest[i] = T (malloc) (CREST_BLOCK), 0x5C, CREST_BLOCK);
  for (int64_t t = 10; t <= ph->last; t += 10)
    {
      clock_frozen_ms = t0 + t;
      ht_keep_allocating ();
    }
  for (size_t i = 0; i < CREST_BLOCKS; i++)
    T (free) (crest[i]);
  clock_frozen_ms = t0 + ph->last + ph->sleep_ms;
  for (int k = 0; k < 5; k++, clock_frozen_ms += 10)
    ht_keep_allocating ();
  unsigned char vec[CREST_BLOCK / 4096];
  ph->resident = ph->total = 0;
  for (size_t i = 0; i < CREST_BLOCKS; i++)
    {
      size_t pages = CREST_BLOCK / page;
      ph->total += pages;
      if (mincore (crest[i], CREST_BLOCK, vec) == 0)
        for (size_t k = 0; k < pages; k++)
          ph->resident += vec[k] & 1;
    }
  return NULL;
}

static void
run_phase (Phase *ph)
{
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, crest_sleep_wake, ph), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  g_test_message ("last tick %lld ms after birth, asleep %lld ms: %zu of %zu pages resident",
                  (long long) ph->last, (long long) ph->sleep_ms, ph->resident, ph->total);
}

static void
test_woken_heap_phase (gconstpointer data)
{
  const int64_t *case_ = data;   /* { last tick, sleep, 1 = crest kept } */
  if (!in_process_at ("1000000"))
    return;
  struct timespec ts;
  g_assert_cmpint (clock_gettime (CLOCK_MONOTONIC_COARSE, &ts), ==, 0);
  clock_frozen_ms = (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  Phase ph = { case_[0], case_[1], 0, 0 };
  run_phase (&ph);
  if (case_[2] && ph.resident < ph.total / 2)
    g_error ("a heap asleep %lld ms (less than two epochs) forgot its crest: %zu of %zu pages resident",
             (long long) ph.sleep_ms, ph.resident, ph.total);
  if (!case_[2] && ph.resident > ph.total / 4)
    g_error ("a heap asleep %lld ms (two epochs) kept its crest: %zu of %zu pages resident",
             (long long) ph.sleep_ms, ph.resident, ph.total);
}

static const int64_t phase_late_short[] = { 630, 700, 1 };    /* since its epoch began: 1330 ms */
static const int64_t phase_early_short[] = { 640, 700, 1 };   /* the tick at 640 rolled: 700 ms */
static const int64_t phase_late_long[] = { 630, 1280, 0 };

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/clock/past-2^31/new-heap-ticks", test_new_heap_ticks);
  g_test_add_func ("/clock/past-2^31/fresh-superslabs-purged", test_fresh_superslabs_purged);
  g_test_add_data_func ("/clock/epoch/asleep-one-epoch-late-keeps-high", phase_late_short, test_woken_heap_phase);
  g_test_add_data_func ("/clock/epoch/asleep-one-epoch-early-keeps-high", phase_early_short, test_woken_heap_phase);
  g_test_add_data_func ("/clock/epoch/asleep-two-epochs-forgets-high", phase_late_long, test_woken_heap_phase);
  return g_test_run ();
}
