/* oom: out-of-memory behaviour.
 *
 *   oom CASE        runs one case in a forked child and reports; exit 0 pass,
 *                   1 fail, 77 skip (meson's skip code)
 *   oom --list      prints the case names
 *
 * "limit-*" and "fill-*" cases lower RLIMIT_AS in the child to its current
 * VmSize (read from /proc/self/status: hakmem's lazily touched address map
 * counts) plus a small margin, then check that allocations that cannot fit
 * fail cleanly: NULL with errno ENOMEM (posix_memalign: return value ENOMEM,
 * *out untouched), nothing crashes, a block given to a failed realloc is
 * intact and still usable, and after freeing, allocation works again.
 * "fill-*" fill the limit with one size range until ENOMEM, verify, free and
 * fill again; "reuse-after-*" also allocate every other range after the
 * frees (memory a range freed must be usable by the others).
 * "absurd" checks sizes no limit could satisfy (SIZE_MAX, SIZE_MAX/2, calloc
 * and reallocarray overflow) without any limit.
 *
 * Sanitizer runtimes reserve terabytes of address space, so the RLIMIT_AS
 * cases skip in ASan/TSan builds; under valgrind (the `valgrind` test setup
 * sets HT_UNDER_VALGRIND) memcheck's own shadow memory counts against the
 * limit and valgrind itself gives up first, so they skip there too. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../ht-api.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

enum { EXIT_SKIP = 77 };

/* Margin above the current VmSize: room for a few SuperSlabs (2 MiB each)
 * and some large blocks, far below the sizes that must fail. */
static const size_t MARGIN = 48 * MiB;
static const size_t TOO_BIG = 512 * MiB;

static int failures;

static void __attribute__ ((format (printf, 3, 4)))
fail_at (const char *file, int line, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  fprintf (stderr, "oom: FAIL %s:%d: ", file, line);
  vfprintf (stderr, fmt, ap);
  fputc ('\n', stderr);
  va_end (ap);
  failures++;
}
#define FAIL(...) fail_at (__FILE__, __LINE__, __VA_ARGS__)

/* The optimizer must not reason about sizes or pointers we pass. */
static inline size_t
opaque (size_t x)
{
  __asm__ volatile ("" : "+r" (x));
  return x;
}

static inline void *
hide (void *p)
{
  __asm__ volatile ("" : "+r" (p));
  return p;
}

/* ---- patterns ---------------------------------------------------------- */

static unsigned char
pat (uint64_t seed, size_t i)
{
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + (i >> 3) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (unsigned char) (x >> ((i & 7) * 8));
}

static void
fill (void *p, size_t n, uint64_t seed)
{
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = pat (seed, i);
}

static size_t
check (const void *p, size_t n, uint64_t seed)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != pat (seed, i))
      return i;
  return SIZE_MAX;
}

/* ---- expectations ------------------------------------------------------ */

/* A call that must fail: p == NULL and errno == ENOMEM. */
#define EXPECT_ENOMEM(call)                                                     \
  do                                                                            \
    {                                                                           \
      errno = 0;                                                                \
      void *p_ = (call);                                                        \
      int e_ = errno;                                                           \
      if (p_ != NULL)                                                           \
        {                                                                       \
          FAIL ("%s returned %p, expected NULL", #call, p_);                    \
          A (free) (p_);                                                        \
        }                                                                       \
      else if (e_ != ENOMEM)                                                    \
        FAIL ("%s: NULL but errno %d (%s), expected ENOMEM", #call, e_,         \
              strerror (e_));                                                   \
    }                                                                           \
  while (0)

#define EXPECT_PM_ENOMEM(align, size)                                           \
  do                                                                            \
    {                                                                           \
      void *out_ = (void *) 0x1234;                                             \
      int rc_ = A (posix_memalign) (&out_, (align), (size));                    \
      if (rc_ != ENOMEM)                                                        \
        FAIL ("posix_memalign(%zu, %zu) returned %d, expected ENOMEM",          \
              (size_t) (align), (size_t) (size), rc_);                          \
      if (rc_ == 0)                                                             \
        A (free) (out_);                                                        \
      else if (out_ != (void *) 0x1234)                                         \
        FAIL ("failed posix_memalign(%zu, %zu) changed *out to %p",             \
              (size_t) (align), (size_t) (size), out_);                         \
    }                                                                           \
  while (0)

/* realloc(p, size) must fail with ENOMEM and leave p's n bytes intact; p is
 * freed at the end (so the failed realloc must not have freed it). */
static void
expect_realloc_fails (void *p, size_t n, uint64_t seed, size_t size, const char *what)
{
  errno = 0;
  void *q = A (realloc) (hide (p), opaque (size));
  int e = errno;
  if (q)
    {
      FAIL ("%s: realloc(%zu-byte block, %zu) returned %p, expected NULL", what, n, size, q);
      A (free) (q);
      return;
    }
  if (e != ENOMEM)
    FAIL ("%s: realloc(%zu-byte block, %zu): errno %d (%s), expected ENOMEM", what, n, size, e,
          strerror (e));
  size_t bad = check (p, n, seed);
  if (bad != SIZE_MAX)
    FAIL ("%s: block %p damaged at offset %zu after a failed realloc", what, p, bad);
  /* still a live block of the right size */
  if (A (malloc_usable_size) (p) < n)
    FAIL ("%s: usable size of %p is %zu < %zu after failed realloc", what, p,
          A (malloc_usable_size) (p), n);
  /* and it can still be grown a little and freed */
  void *r = A (realloc) (p, n + 16);
  if (!r)
    FAIL ("%s: realloc(%p, %zu) after the failed one returned NULL", what, p, n + 16);
  else
    {
      bad = check (r, n, seed);
      if (bad != SIZE_MAX)
        FAIL ("%s: realloc lost the prefix at offset %zu", what, bad);
      A (free) (r);
    }
}

/* ---- address-space limit ----------------------------------------------- */

static size_t
vm_size (void)
{
  FILE *f = fopen ("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  if (!f)
    return 0;
  while (fgets (line, sizeof line, f))
    if (sscanf (line, "VmSize: %zu kB", &kb) == 1)
      break;
  fclose (f);
  return kb * KiB;
}

static size_t limit_bytes;

static int
set_limit (void)
{
  if (UNDER_SANITIZER)
    {
      printf ("oom: sanitizer build: RLIMIT_AS cases skipped\n");
      return EXIT_SKIP;
    }
  if (getenv ("HT_UNDER_VALGRIND"))
    {
      printf ("oom: under valgrind: RLIMIT_AS cases skipped\n");
      return EXIT_SKIP;
    }
  /* make sure hakmem is initialised (its reservations are in VmSize) */
  A (free) (A (malloc) (opaque (64)));
  size_t vm = vm_size ();
  if (vm == 0)
    {
      printf ("oom: cannot read VmSize from /proc/self/status\n");
      return EXIT_SKIP;
    }
  limit_bytes = vm + MARGIN;
  struct rlimit rl = { limit_bytes, limit_bytes };
  if (setrlimit (RLIMIT_AS, &rl) != 0)
    {
      FAIL ("setrlimit(RLIMIT_AS, %zu): %s", limit_bytes, strerror (errno));
      return 1;
    }
  printf ("oom: VmSize %zu MiB, RLIMIT_AS set to %zu MiB\n", vm / MiB, limit_bytes / MiB);
  fflush (stdout);
  return 0;
}

/* ---- cases ------------------------------------------------------------- */

/* Sizes no address-space limit could allow, without any limit. */
static void
case_absurd (void)
{
  const size_t sizes[] = {
    SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4095, SIZE_MAX - (2 * MiB), SIZE_MAX / 2,
    SIZE_MAX / 2 + 1, (size_t) PTRDIFF_MAX, (size_t) 1 << 62, (size_t) 1 << 48,
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    {
      size_t s = opaque (sizes[i]);
      EXPECT_ENOMEM (A (malloc) (s));
      EXPECT_ENOMEM (A (calloc) (1, s));
      EXPECT_ENOMEM (A (calloc) (s, 1));
      EXPECT_ENOMEM (A (realloc) (NULL, s));
      EXPECT_ENOMEM (A (aligned_alloc) (64, s & ~(size_t) 63));
      EXPECT_ENOMEM (A (aligned_alloc) (MiB, s & ~(MiB - 1)));
      EXPECT_ENOMEM (A (memalign) (4096, s));
      EXPECT_PM_ENOMEM (16, s);
      EXPECT_PM_ENOMEM (MiB, s);
      EXPECT_ENOMEM (A (valloc) (s));
      EXPECT_ENOMEM (A (pvalloc) (s));
    }
  /* calloc and reallocarray overflow: nmemb * size does not fit size_t */
  EXPECT_ENOMEM (A (calloc) (opaque (SIZE_MAX / 2), 3));
  EXPECT_ENOMEM (A (calloc) (opaque ((size_t) 1 << 33), (size_t) 1 << 31));
  EXPECT_ENOMEM (A (calloc) (opaque (SIZE_MAX), opaque (SIZE_MAX)));
  EXPECT_ENOMEM (A (calloc) (opaque (65536), (SIZE_MAX / 65536) + 1));
  EXPECT_ENOMEM (A (reallocarray) (NULL, opaque (SIZE_MAX / 2), 3));
  EXPECT_ENOMEM (A (reallocarray) (NULL, opaque ((size_t) 1 << 40), (size_t) 1 << 40));

  /* a live block of each range survives failed realloc/reallocarray */
  const size_t live[] = { 24, 1000, 8 * KiB, 200 * KiB, 2 * MiB };
  for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
    {
      size_t n = live[i];
      uint64_t seed = 100 + i;
      void *p = A (malloc) (opaque (n));
      if (!p)
        {
          FAIL ("malloc(%zu) returned NULL", n);
          continue;
        }
      fill (p, n, seed);
      errno = 0;
      void *q = A (reallocarray) (hide (p), opaque (SIZE_MAX / 4), 8);
      if (q || errno != ENOMEM)
        FAIL ("reallocarray(%zu-byte block, SIZE_MAX/4, 8) = %p, errno %d; expected NULL/ENOMEM",
              n, q, errno);
      if (check (p, n, seed) != SIZE_MAX)
        FAIL ("failed reallocarray damaged the %zu-byte block", n);
      expect_realloc_fails (p, n, seed, SIZE_MAX, "absurd");
      p = A (malloc) (opaque (n));
      fill (p, n, seed);
      expect_realloc_fails (p, n, seed, SIZE_MAX / 2, "absurd/2");
      p = A (malloc) (opaque (n));
      fill (p, n, seed);
      expect_realloc_fails (p, n, seed, SIZE_MAX - 4095, "absurd-4095");
    }
  /* and the allocator still works */
  void *p = A (malloc) (opaque (100));
  if (!p)
    FAIL ("malloc(100) failed after the absurd requests");
  A (free) (p);
}

/* Under the limit: single requests that cannot fit fail; fitting ones work. */
static void
case_limit_requests (void)
{
  int rc = set_limit ();
  if (rc)
    exit (rc == EXIT_SKIP ? EXIT_SKIP : 1);
  size_t big = opaque (TOO_BIG);

  EXPECT_ENOMEM (A (malloc) (big));
  EXPECT_ENOMEM (A (malloc) (limit_bytes));
  EXPECT_ENOMEM (A (calloc) (1, big));
  EXPECT_ENOMEM (A (calloc) (opaque (64 * KiB), 8 * KiB));   /* 512 MiB */
  EXPECT_ENOMEM (A (calloc) (big / 16, 16));
  EXPECT_ENOMEM (A (realloc) (NULL, big));
  EXPECT_ENOMEM (A (reallocarray) (NULL, big / 8, 8));
  EXPECT_ENOMEM (A (aligned_alloc) (64, big));
  EXPECT_ENOMEM (A (aligned_alloc) (MiB, big));
  EXPECT_ENOMEM (A (memalign) (4096, big));
  EXPECT_ENOMEM (A (valloc) (big));
  EXPECT_PM_ENOMEM (64, big);
  EXPECT_PM_ENOMEM (MiB, big);
  /* an alignment so large the over-allocation alone exceeds the limit */
  EXPECT_ENOMEM (A (aligned_alloc) ((size_t) 256 * MiB, 256 * MiB));
  EXPECT_PM_ENOMEM ((size_t) 256 * MiB, 4096);

  /* failed realloc keeps the block: tiny, mid, large (mremap path) */
  const size_t live[] = { 40, 700, 16 * KiB, 250 * KiB, 300 * KiB, 4 * MiB };
  for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
    {
      size_t n = live[i];
      void *p = A (malloc) (opaque (n));
      if (!p)
        {
          FAIL ("malloc(%zu) under the limit returned NULL (errno %d)", n, errno);
          continue;
        }
      fill (p, n, 7 + i);
      expect_realloc_fails (p, n, 7 + i, big, "limit");
    }

  /* requests that fit still work under the limit */
  void *p = A (malloc) (opaque (8 * MiB));
  if (!p)
    FAIL ("malloc(8 MiB) under a limit %zu MiB above VmSize failed", MARGIN / MiB);
  else
    {
      fill (p, 8 * MiB, 3);
      if (check (p, 8 * MiB, 3) != SIZE_MAX)
        FAIL ("8 MiB block damaged");
      A (free) (p);
    }
  p = A (calloc) (opaque (1024), 1024);
  if (!p)
    FAIL ("calloc(1024, 1024) under the limit failed");
  A (free) (p);
}

struct rec
{
  void *p;
  size_t n;
};

static size_t
fill_size (int range, uint64_t *rng)
{
  *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
  uint64_t x = *rng >> 20;
  switch (range)
    {
    case 0: return 1 + x % HT_TINY_MAX;                              /* tiny */
    case 1: return HT_TINY_MAX + 1 + x % (HT_MID_MAX - HT_TINY_MAX); /* mid */
    case 2: return HT_MID_MAX + 1 + x % (4 * MiB);                   /* large */
    default:
      {
        unsigned r = x % 100;
        x >>= 8;
        return r < 70 ? 1 + x % HT_TINY_MAX
               : r < 95 ? HT_TINY_MAX + 1 + x % (128 * KiB)
                        : HT_MID_MAX + x % (2 * MiB);
      }
    }
}

/* Allocate blocks of one size range until the allocator says ENOMEM; every
 * block is patterned and checked; free everything; the same amount must be
 * allocatable again (and a block of another range too). Returns the count. */
static size_t
fill_round (int range, struct rec *recs, size_t max, int round)
{
  uint64_t rng = 12345 + (uint64_t) range;
  size_t n = 0, bytes = 0;
  int how = 0;
  for (;;)
    {
      if (n == max)
        {
          FAIL ("range %d: %zu allocations (%zu MiB) under a %zu MiB margin and no ENOMEM",
                range, n, bytes / MiB, MARGIN / MiB);
          break;
        }
      size_t sz = fill_size (range, &rng);
      void *p = NULL;
      errno = 0;
      switch (how++ % 4)
        {
        case 0: p = A (malloc) (sz); break;
        case 1: p = A (calloc) (1, sz); break;
        case 2:
          sz = (sz + 63) & ~(size_t) 63;
          p = A (aligned_alloc) (64, sz);
          break;
        case 3:
          {
            int rc = A (posix_memalign) (&p, 256, sz);
            if (rc != 0)
              {
                if (rc != ENOMEM)
                  FAIL ("posix_memalign(256, %zu) returned %d under the limit", sz, rc);
                p = NULL;
                errno = ENOMEM;
              }
            break;
          }
        }
      if (!p)
        {
          if (errno != ENOMEM)
            FAIL ("range %d: allocation %zu (%zu bytes) failed with errno %d, expected ENOMEM",
                  range, n, sz, errno);
          break;
        }
      fill (p, sz < 4096 ? sz : 4096, (uint64_t) n);   /* first page: enough to see reuse */
      recs[n].p = p;
      recs[n].n = sz;
      n++;
      bytes += sz;
    }
  printf ("oom: range %d round %d: %zu blocks, %zu KiB before ENOMEM\n", range, round, n,
          bytes / KiB);
  fflush (stdout);
  for (size_t i = 0; i < n; i++)
    {
      size_t m = recs[i].n < 4096 ? recs[i].n : 4096;
      size_t bad = check (recs[i].p, m, (uint64_t) i);
      if (bad != SIZE_MAX)
        {
          FAIL ("range %d: block %zu (%p, %zu bytes) damaged at offset %zu", range, i, recs[i].p,
                recs[i].n, bad);
          break;
        }
    }
  /* a failed realloc at the edge keeps the block */
  if (n > 0)
    {
      size_t m = recs[0].n < 4096 ? recs[0].n : 4096;
      void *q = A (realloc) (recs[0].p, opaque (TOO_BIG));
      if (q)
        {
          FAIL ("range %d: realloc to %zu MiB at the limit succeeded", range, TOO_BIG / MiB);
          recs[0].p = q;
        }
      else if (check (recs[0].p, m, 0) != SIZE_MAX)
        FAIL ("range %d: failed realloc at the limit damaged the block", range);
    }
  for (size_t i = 0; i < n; i++)
    A (free) (recs[i].p);
  return n;
}

static void
case_fill (int range, int cross)
{
  size_t max = 4 * 1024 * 1024;
  /* the record array comes from mmap'ed memory before the limit (not from
   * the allocator under test) */
  struct rec *recs = calloc (max, sizeof *recs);
  if (!recs)
    {
      FAIL ("calloc for the records");
      return;
    }
  int rc = set_limit ();
  if (rc)
    {
      free (recs);   /* LeakSanitizer looks at exit */
      exit (rc == EXIT_SKIP ? EXIT_SKIP : 1);
    }
  size_t first = fill_round (range, recs, max, 1);
  if (first == 0)
    FAIL ("range %d: not a single allocation fitted under the limit", range);
  /* freed memory must be usable again: at least most of what fitted before */
  size_t second = fill_round (range, recs, max, 2);
  if (second < first / 2 || second == 0)
    FAIL ("range %d: after freeing, only %zu blocks fit again (first round: %zu)", range, second,
          first);
  /* reuse-after-*: ordinary allocations of every range work after the
   * frees (memory cached for one range must not starve the others) */
  const size_t after[] = { 16, 512, 4 * KiB, 64 * KiB, 256 * KiB, 512 * KiB };
  for (size_t i = 0; cross && i < sizeof after / sizeof after[0]; i++)
    {
      void *p = A (malloc) (opaque (after[i]));
      if (!p)
        FAIL ("range %d: malloc(%zu) after freeing everything returned NULL", range, after[i]);
      else
        {
          fill (p, after[i], 9);
          A (free) (p);
        }
    }
  free (recs);
}

/* A large block that grows by realloc after a fill of mid sizes up to the
 * limit was freed: the address space the caches keep for those sizes must
 * not make the growth fail (mremap needs room for the larger span). */
static void
case_grow_after_mid (void)
{
  size_t max = 4 * 1024 * 1024;
  struct rec *recs = calloc (max, sizeof *recs);
  if (!recs)
    {
      FAIL ("calloc for the records");
      return;
    }
  unsigned char *p = A (malloc) (opaque (512 * KiB));   /* before the limit */
  if (!p)
    {
      FAIL ("malloc(512 KiB) before the limit");
      return;
    }
  fill (p, 4096, 5);
  int rc = set_limit ();
  if (rc)
    {
      free (recs);   /* LeakSanitizer looks at exit */
      exit (rc == EXIT_SKIP ? EXIT_SKIP : 1);
    }
  if (fill_round (1, recs, max, 1) == 0)
    FAIL ("range 1: not a single allocation fitted under the limit");
  void *q = A (realloc) (p, opaque (8 * MiB));
  if (!q)
    FAIL ("realloc(512 KiB -> 8 MiB) after freeing everything returned NULL");
  else if (check (q, 4096, 5) != SIZE_MAX)
    FAIL ("realloc(512 KiB -> 8 MiB) damaged the block");
  A (free) (q ? q : p);
  free (recs);
}

static void case_fill_tiny (void) { case_fill (0, 0); }
static void case_fill_mid (void) { case_fill (1, 0); }
static void case_fill_large (void) { case_fill (2, 0); }
static void case_fill_mixed (void) { case_fill (3, 0); }
static void case_reuse_tiny (void) { case_fill (0, 1); }
static void case_reuse_mid (void) { case_fill (1, 1); }
static void case_reuse_large (void) { case_fill (2, 1); }

/* A thread that grew, freed everything and went to sleep (a worker waiting
 * for work) keeps its empty SuperSlabs for its recent high, and a sleeping
 * thread never looks at its clock: under the limit, the memory pressure
 * path must take them back, or a large block finds no address space
 * (without that, malloc(64 MiB) returned NULL in 3 runs of 3). */
enum { SLEEPER_BLOCKS = 1536, SLEEPER_BLOCK = 32 * 1024 };   /* 48 MiB */
static void *sleeper_blocks[SLEEPER_BLOCKS];
static pthread_mutex_t sleeper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleeper_cond = PTHREAD_COND_INITIALIZER;
static int sleeper_stage;   /* 1: freed, sleeping; 2: may exit */

static void
sleep_ms (long ms)
{
  struct timespec ts = { 0, ms * 1000000L };
  nanosleep (&ts, NULL);
}

static void *
grow_free_and_sleep (void *arg)
{
  (void) arg;
  /* four steps a decay period (20 ms) apart: the heap's clock, which
   * ticks on its misses, samples the growth and the crest */
  for (size_t step = 0; step < 4; step++)
    {
      for (size_t i = step * SLEEPER_BLOCKS / 4; i < (step + 1) * SLEEPER_BLOCKS / 4; i++)
        {
          sleeper_blocks[i] = A (malloc) (opaque (SLEEPER_BLOCK));
          if (!sleeper_blocks[i])
            {
              FAIL ("malloc(32 KiB) before the limit");
              break;
            }
          memset (sleeper_blocks[i], 0x5A, 64);
        }
      sleep_ms (25);
    }
  for (size_t i = 0; i < SLEEPER_BLOCKS; i++)
    A (free) (sleeper_blocks[i]);
  pthread_mutex_lock (&sleeper_lock);
  sleeper_stage = 1;
  pthread_cond_broadcast (&sleeper_cond);
  while (sleeper_stage != 2)
    pthread_cond_wait (&sleeper_cond, &sleeper_lock);
  pthread_mutex_unlock (&sleeper_lock);
  return NULL;
}

static void
case_sleeping_heap (void)
{
  pthread_t t;
  if (pthread_create (&t, NULL, grow_free_and_sleep, NULL) != 0)
    {
      FAIL ("pthread_create");
      return;
    }
  pthread_mutex_lock (&sleeper_lock);
  while (sleeper_stage != 1)
    pthread_cond_wait (&sleeper_cond, &sleeper_lock);
  pthread_mutex_unlock (&sleeper_lock);
  int rc = set_limit ();
  if (rc)
    exit (rc == EXIT_SKIP ? EXIT_SKIP : 1);
  /* MARGIN (48 MiB) is too little for 64 MiB unless the sleeper's empty
   * SuperSlabs are unmapped */
  void *big = A (malloc) (opaque (64 * MiB));
  if (!big)
    FAIL ("malloc(64 MiB) with a sleeping thread's freed 48 MiB: NULL");
  else
    {
      fill (big, 4096, 3);
      A (free) (big);
    }
  pthread_mutex_lock (&sleeper_lock);
  sleeper_stage = 2;
  pthread_cond_broadcast (&sleeper_cond);
  pthread_mutex_unlock (&sleeper_lock);
  pthread_join (t, NULL);
}

static const struct
{
  const char *name;
  void (*fn) (void);
} cases[] = {
  { "absurd", case_absurd },
  { "limit-requests", case_limit_requests },
  { "fill-tiny", case_fill_tiny },
  { "fill-mid", case_fill_mid },
  { "fill-large", case_fill_large },
  { "fill-mixed", case_fill_mixed },
  { "reuse-after-tiny", case_reuse_tiny },
  { "reuse-after-mid", case_reuse_mid },
  { "reuse-after-large", case_reuse_large },
  { "grow-after-mid", case_grow_after_mid },
  { "sleeping-heap", case_sleeping_heap },
};
#define NCASES (sizeof cases / sizeof cases[0])

int
main (int argc, char **argv)
{
  if (argc != 2)
    {
      fprintf (stderr, "usage: oom CASE | --list\n");
      return 2;
    }
  if (!strcmp (argv[1], "--list"))
    {
      for (size_t i = 0; i < NCASES; i++)
        puts (cases[i].name);
      return 0;
    }
  for (size_t i = 0; i < NCASES; i++)
    {
      if (strcmp (argv[1], cases[i].name))
        continue;
      fflush (stdout);
      pid_t pid = fork ();
      if (pid < 0)
        {
          perror ("fork");
          return 1;
        }
      if (pid == 0)
        {
          cases[i].fn ();
          fflush (stdout);
          _exit (failures ? 1 : 0);
        }
      int st;
      if (waitpid (pid, &st, 0) < 0)
        {
          perror ("waitpid");
          return 1;
        }
      if (WIFSIGNALED (st))
        {
          fprintf (stderr, "oom: %s: child killed by signal %d (%s)\n", argv[1], WTERMSIG (st),
                   strsignal (WTERMSIG (st)));
          return 1;
        }
      int code = WEXITSTATUS (st);
      if (code == EXIT_SKIP)
        return EXIT_SKIP;
      printf ("oom: %s: %s\n", argv[1], code == 0 ? "ok" : "FAILED");
      return code == 0 ? 0 : 1;
    }
  fprintf (stderr, "oom: unknown case %s\n", argv[1]);
  return 2;
}
