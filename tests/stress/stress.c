/* stress: many threads allocating, checking and freeing blocks of every size
 * range, handing them to each other, and dying while their blocks live on.
 *
 * Every block is filled, when it is allocated, with a pattern derived from
 * its address, size and a per-block seed, and the whole block is verified
 * right before it is freed, reallocated or handed over. realloc must keep the
 * prefix (verified against the old pattern). calloc must return zeros,
 * aligned allocations must be aligned, malloc_usable_size must be >= the
 * requested size. Blocks travel between threads through a shared array of
 * slots, so most frees are remote frees. Worker threads live for a bounded
 * number of operations, leave their blocks in the shared array and are
 * replaced by new threads, one at a time, while the others keep running.
 *
 * Any damage prints a message naming the block and exits with status 1.
 *
 * Threads may outnumber the cores many times over (up to 1024): the
 * allocator's locks on its miss paths then wait for holders that the
 * scheduler took off the CPU. Past 16 threads each thread keeps fewer
 * blocks of its own and the shared array stops growing (LIVE_BLOCKS), so
 * the memory held stays about that of 16 threads whatever the count.
 *
 * A watchdog ends the run (status 1) when no thread makes progress for
 * --watchdog seconds (default 60): a lock that never comes free is a
 * failure, not a test timeout.
 *
 * Short run (meson test, suite 'stress'):
 *   stress --threads 4 --seconds 5
 *   stress --threads 64 --seconds 2; stress --threads 256 --seconds 2
 * Soak (manual, 10 minutes, 256 threads on a 2-core machine): the process's
 * RSS is sampled every second and must stay flat (see check_rss):
 *   nice -n 10 ./build/tests/stress/stress --threads 256 --soak 600
 *   HAKMEM_SAFETY=mincore HAKMEM_STATS=1 ./build/tests/stress/stress --threads 256 --soak 600
 * Long soak (manual), e.g. 10 minutes under each box:
 *   ./build/tests/stress/stress --threads 8 --seconds 600 --seed 1
 *   HAKMEM_POOL=none  ./build/tests/stress/stress --threads 8 --seconds 600
 *   HAKMEM_FRONT=none ./build/tests/stress/stress --threads 8 --seconds 600
 *   HAKMEM_SAFETY=mincore HAKMEM_STATS=1 ./build/tests/stress/stress --seconds 600
 * A fixed amount of work instead of a time: --iterations N (total operations
 * over all threads). --verbose prints progress every second. --corrupt
 * flips one byte of one block on purpose: the run must then fail (a test
 * checks that the checker works).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ht-api.h"

/* LIVE_BLOCKS: the blocks a thread keeps of its own (at most LOCAL_SLOTS,
 * at least MIN_LOCAL_SLOTS) and those of the shared array (at most
 * MAX_SHARED) are cut down so that about this many are live at once. */
enum { MAX_THREADS = 1024, LOCAL_SLOTS = 128, MIN_LOCAL_SLOTS = 8, SHARED_PER_THREAD = 256,
       MAX_SHARED = 4096, LIVE_BLOCKS = 2048 };

/* How a block was obtained: decides what is checked right after. */
enum kind { K_MALLOC, K_CALLOC, K_ALIGNED, K_POSIX_MEMALIGN, K_MEMALIGN, K_REALLOC_NULL, K_NKINDS };
static const char *const kind_name[] = {
  "malloc", "calloc", "aligned_alloc", "posix_memalign", "memalign", "realloc(NULL)",
};

struct block
{
  unsigned char *p;     /* NULL: empty slot */
  size_t size;          /* requested size: the bytes the pattern covers */
  uint64_t seed;        /* pattern seed */
  unsigned origin;      /* thread serial that last (re)allocated it */
};

struct shared_slot
{
  pthread_mutex_t lock;
  struct block b;
};

static struct shared_slot *shared;
static size_t n_shared;

static int opt_threads = 4;
static double opt_seconds = 0;
static uint64_t opt_iterations = 0;
static uint64_t opt_seed = 1;
static int opt_verbose = 0;
static int opt_corrupt = 0;   /* --corrupt: damage one block on purpose (checks the checker) */
static int opt_soak = 0;      /* --soak S: run S seconds, sample RSS, check it stays flat */
static double opt_watchdog = 60;
static int n_local = LOCAL_SLOTS;   /* blocks a thread keeps of its own */

static atomic_int stop;
static atomic_uint_fast64_t total_ops;
static atomic_uint_fast64_t n_allocs, n_frees, n_reallocs, n_transfers, n_remote_frees, n_threads_made;
static atomic_uint_fast64_t bytes_checked;
static atomic_uint_fast64_t progress;   /* grows while any thread works: the watchdog's */
static atomic_int_fast64_t live_bytes;  /* requested bytes of the blocks live now */

static uint64_t
mix (uint64_t x)
{
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t
rnd (uint64_t *s)
{
  *s = mix (*s);
  return *s;
}

/* Pattern word for the 8-byte group at offset i (i multiple of 8). Depends on
 * the block's address, size and seed, so a block written over by another one,
 * handed out twice, or moved without copying is detected. */
static inline uint64_t
pattern_word (uint64_t base, size_t i)
{
  return base ^ ((uint64_t) i * 0xD6E8FEB86659FD93ull);
}

static inline uint64_t
pattern_base (const void *p, size_t size, uint64_t seed)
{
  return mix (seed ^ ((uint64_t) (uintptr_t) p * 31) ^ ((uint64_t) size << 40));
}

static void
fill (unsigned char *p, size_t n, uint64_t base)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    {
      uint64_t w = pattern_word (base, i);
      memcpy (p + i, &w, 8);
    }
  if (i < n)
    {
      uint64_t w = pattern_word (base, i);
      memcpy (p + i, &w, n - i);
    }
}

/* Offset of the first byte of p[0..n) not matching the pattern, or SIZE_MAX. */
static size_t
check (const unsigned char *p, size_t n, uint64_t base)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    {
      uint64_t w = pattern_word (base, i), got;
      memcpy (&got, p + i, 8);
      if (got != w)
        break;
    }
  for (; i < n; i++)
    {
      uint64_t w = pattern_word (base, i & ~(size_t) 7);
      unsigned char want;
      memcpy (&want, (unsigned char *) &w + (i & 7), 1);
      if (p[i] != want)
        return i;
    }
  return SIZE_MAX;
}

static void __attribute__ ((noreturn, format (printf, 1, 2)))
die (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  fputs ("stress: FAILED: ", stderr);
  vfprintf (stderr, fmt, ap);
  fputc ('\n', stderr);
  va_end (ap);
  fflush (stderr);
  _exit (1);
}

/* b->seed is the pattern base the block was filled with (derived from its
 * address, size and a random seed when it was filled). After realloc moves a
 * block the prefix still holds the old base's pattern, which is checked. */
static void
verify (const struct block *b, const char *when, unsigned self)
{
  size_t bad = check (b->p, b->size, b->seed);
  atomic_fetch_add_explicit (&bytes_checked, b->size, memory_order_relaxed);
  if (bad != SIZE_MAX)
    die ("thread %u, before %s: block %p (%zu bytes, allocated by thread %u, seed %#" PRIx64
         ") damaged at offset %zu: byte %#x",
         self, when, (void *) b->p, b->size, b->origin, b->seed, bad, b->p[bad]);
}

/* Size ranges: mostly tiny, some mid, few large (up to 4 MiB). */
static size_t
pick_size (uint64_t *rng)
{
  uint64_t x = rnd (rng);
  unsigned r = x % 1000;
  x >>= 10;
  if (r < 800)
    {
      /* tiny: favour small sizes */
      if (r < 400)
        return 1 + x % 128;
      return 1 + x % HT_TINY_MAX;
    }
  if (r < 985)
    return HT_TINY_MAX + 1 + x % (HT_MID_MAX - HT_TINY_MAX);
  return HT_MID_MAX + 1 + x % (4 * MiB - HT_MID_MAX);
}

static size_t
pick_align (uint64_t *rng)
{
  uint64_t x = rnd (rng);
  /* 16 .. 64 KiB mostly, sometimes up to 1 MiB */
  unsigned shift = 4 + (unsigned) (x % 13);
  if (shift > 16 && (x >> 8) % 4 != 0)
    shift = 16;
  return (size_t) 1 << shift;
}

static void
alloc_block (struct block *b, uint64_t *rng, unsigned self)
{
  size_t size = pick_size (rng);
  unsigned kind = (unsigned) (rnd (rng) % 20);
  size_t align = 0;
  void *p = NULL;

  /* 70% malloc, then calloc, aligned variants, realloc(NULL) */
  if (kind < 14)
    kind = K_MALLOC;
  else if (kind < 16)
    kind = K_CALLOC;
  else
    kind = kind - 16 + K_ALIGNED;   /* aligned, posix_memalign, memalign, realloc(NULL) */
  switch (kind)
    {
    case K_MALLOC:
      p = A (malloc) (size);
      break;
    case K_CALLOC:
      {
        size_t n = 1 + rnd (rng) % 16;
        size = (size + n - 1) / n * n;
        p = A (calloc) (n, size / n);
        break;
      }
    case K_ALIGNED:
      align = pick_align (rng);
      size = (size + align - 1) & ~(align - 1);   /* C11 wants a multiple */
      p = A (aligned_alloc) (align, size);
      break;
    case K_POSIX_MEMALIGN:
      {
        align = pick_align (rng);
        int rc = A (posix_memalign) (&p, align, size);
        if (rc != 0)
          die ("thread %u: posix_memalign(%zu, %zu) returned %d", self, align, size, rc);
        break;
      }
    case K_MEMALIGN:
      align = pick_align (rng);
      p = A (memalign) (align, size);
      break;
    case K_REALLOC_NULL:
      p = A (realloc) (NULL, size);
      break;
    }
  if (!p)
    die ("thread %u: %s(%zu bytes, align %zu) returned NULL (errno %d)", self, kind_name[kind],
         size, align, errno);
  if (align && ((uintptr_t) p & (align - 1)))
    die ("thread %u: %s(align %zu, %zu bytes) returned %p, not aligned", self, kind_name[kind],
         align, size, p);
  if (((uintptr_t) p & 15) != 0)
    die ("thread %u: %s(%zu) returned %p, not 16-byte aligned", self, kind_name[kind], size, p);
  size_t usable = A (malloc_usable_size) (p);
  if (usable < size)
    die ("thread %u: malloc_usable_size(%p) = %zu < requested %zu (%s)", self, p, usable, size,
         kind_name[kind]);
  if (kind == K_CALLOC)
    {
      const unsigned char *c = p;
      for (size_t i = 0; i < size; i++)
        if (c[i] != 0)
          die ("thread %u: calloc block %p (%zu bytes) not zero at offset %zu: %#x", self, p,
               size, i, c[i]);
    }
  b->p = p;
  b->size = size;
  b->seed = pattern_base (p, size, rnd (rng));
  b->origin = self;
  fill (b->p, size, b->seed);
  atomic_fetch_add_explicit (&live_bytes, (int_fast64_t) size, memory_order_relaxed);
  atomic_fetch_add_explicit (&n_allocs, 1, memory_order_relaxed);
}

static void
free_block (struct block *b, unsigned self, const char *why)
{
  static atomic_int corrupt_countdown = 1000;
  if (opt_corrupt && atomic_fetch_sub (&corrupt_countdown, 1) == 1)
    b->p[b->size / 2] ^= 0x20;
  verify (b, why, self);
  if (b->origin != self)
    atomic_fetch_add_explicit (&n_remote_frees, 1, memory_order_relaxed);
  A (free) (b->p);
  atomic_fetch_sub_explicit (&live_bytes, (int_fast64_t) b->size, memory_order_relaxed);
  b->p = NULL;
  atomic_fetch_add_explicit (&n_frees, 1, memory_order_relaxed);
}

static void
realloc_block (struct block *b, uint64_t *rng, unsigned self)
{
  verify (b, "realloc", self);
  size_t nsize = (rnd (rng) % 4 == 0) ? pick_size (rng)
                 : (rnd (rng) & 1) ? b->size + 1 + rnd (rng) % (b->size + 64)
                                   : 1 + rnd (rng) % b->size;
  if (nsize > 4 * MiB)
    nsize = 4 * MiB;
  uintptr_t old = (uintptr_t) b->p;   /* for messages only */
  unsigned char *q = A (realloc) (b->p, nsize);
  if (!q)
    die ("thread %u: realloc(%#lx, %zu) returned NULL (errno %d)", self, (unsigned long) old,
         nsize, errno);
  if (((uintptr_t) q & 15) != 0)
    die ("thread %u: realloc(%zu) returned %p, not 16-byte aligned", self, nsize, (void *) q);
  size_t keep = nsize < b->size ? nsize : b->size;
  size_t bad = check (q, keep, b->seed);
  if (bad != SIZE_MAX)
    die ("thread %u: realloc(%#lx, %zu -> %zu) = %p lost the prefix at offset %zu", self,
         (unsigned long) old, b->size, nsize, (void *) q, bad);
  size_t usable = A (malloc_usable_size) (q);
  if (usable < nsize)
    die ("thread %u: malloc_usable_size(%p) = %zu < %zu after realloc", self, (void *) q, usable,
         nsize);
  atomic_fetch_add_explicit (&live_bytes, (int_fast64_t) nsize - (int_fast64_t) b->size,
                             memory_order_relaxed);
  b->p = q;
  b->size = nsize;
  b->seed = pattern_base (q, nsize, rnd (rng));
  b->origin = self;
  fill (q, nsize, b->seed);
  atomic_fetch_add_explicit (&n_reallocs, 1, memory_order_relaxed);
}

/* Swap a local block with a shared slot: the block we give away is verified
 * first, the one we take is verified when we get it. */
static void
transfer (struct block *local, uint64_t *rng, unsigned self)
{
  struct shared_slot *s = &shared[rnd (rng) % n_shared];
  if (local->p)
    verify (local, "handing it over", self);
  pthread_mutex_lock (&s->lock);
  struct block got = s->b;
  s->b = *local;
  pthread_mutex_unlock (&s->lock);
  *local = got;
  if (local->p)
    verify (local, "taking it over", self);
  atomic_fetch_add_explicit (&n_transfers, 1, memory_order_relaxed);
}

struct worker
{
  pthread_t tid;
  int running;
  unsigned serial;
  uint64_t rng;
  uint64_t lifetime;      /* operations before the thread ends */
  atomic_int done;
};

static void *
worker_main (void *arg)
{
  struct worker *w = arg;
  struct block local[LOCAL_SLOTS];
  uint64_t rng = w->rng;
  unsigned self = w->serial;

  memset (local, 0, sizeof local);
  for (uint64_t op = 0; op < w->lifetime; op++)
    {
      /* every op: with hundreds of threads on two cores, one that looked
       * only every 64 ops would take seconds to see the stop */
      if (atomic_load_explicit (&stop, memory_order_relaxed))
        break;
      if ((op & 63) == 0)
        {
          atomic_fetch_add_explicit (&progress, 1, memory_order_relaxed);
          if (opt_iterations
              && atomic_fetch_add_explicit (&total_ops, 64, memory_order_relaxed) >= opt_iterations)
            {
              atomic_store (&stop, 1);
              break;
            }
        }
      struct block *b = &local[rnd (&rng) % (unsigned) n_local];
      unsigned r = (unsigned) (rnd (&rng) % 100);
      if (r < 40)
        {
          if (b->p)
            free_block (b, self, "free");
          alloc_block (b, &rng, self);
          /* most new blocks go straight to the shared array, so that most
           * frees are of blocks another thread allocated */
          if (rnd (&rng) % 4 != 0)
            transfer (b, &rng, self);
        }
      else if (r < 52)
        {
          if (b->p)
            realloc_block (b, &rng, self);
          else
            alloc_block (b, &rng, self);
        }
      else if (r < 80)
        transfer (b, &rng, self);
      else if (b->p)
        free_block (b, self, "free");
    }
  if (!opt_iterations)
    atomic_fetch_add_explicit (&total_ops, w->lifetime, memory_order_relaxed);

  /* Dying: about half of the blocks are left in the shared array (their
   * owner heap goes away while they live on), the rest are freed here. */
  for (int i = 0; i < n_local; i++)
    {
      if (!local[i].p)
        continue;
      if (rnd (&rng) & 1)
        transfer (&local[i], &rng, self);
      if (local[i].p)
        free_block (&local[i], self, "free at thread exit");
    }
  atomic_store (&w->done, 1);
  return NULL;
}

static double
now (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned next_serial;

/* The process's resident set in KiB (VmRSS), or -1. */
static long
rss_kib (void)
{
  FILE *f = fopen ("/proc/self/status", "r");
  if (!f)
    return -1;
  char line[256];
  long kib = -1;
  while (fgets (line, sizeof line, f))
    if (sscanf (line, "VmRSS: %ld", &kib) == 1)
      break;
  fclose (f);
  return kib;
}

struct sample
{
  long rss_kib;
  int64_t live_kib;   /* the blocks the program holds: its own part of the RSS */
};

/* The soak's verdict on RSS sampled once a second. The first tenth of the
 * samples is left out (caches and the shared array fill from empty: the
 * RSS climbs for some 10 s), then the first quarter's mean of the rest is
 * compared with the last quarter's. What the program holds itself
 * moves (a few large blocks of up to 4 MiB dominate it), so that part of
 * the change is taken out: the rest is the allocator's own (caches, pool,
 * metadata, pages not given back), which must not creep up. The margin,
 * 10% of the first quarter's RSS (at least 16 MiB), is several times the
 * spread of quarter means seen on runs of the default box, and below what
 * a leak of one small block per thread made, or of a heap's pages per
 * thread exit, adds over 10 minutes. */
static void
check_rss (const struct sample *smp, size_t n)
{
  size_t warm = n / 10;
  smp += warm;
  n -= warm;
  if (n < 8)
    die ("soak: only %zu RSS samples past the warm-up: run it longer", n);
  size_t q = n / 4;
  double rss0 = 0, rss1 = 0, live0 = 0, live1 = 0;
  for (size_t i = 0; i < q; i++)
    {
      rss0 += (double) smp[i].rss_kib;
      live0 += (double) smp[i].live_kib;
      rss1 += (double) smp[n - q + i].rss_kib;
      live1 += (double) smp[n - q + i].live_kib;
    }
  rss0 /= (double) q;
  rss1 /= (double) q;
  live0 /= (double) q;
  live1 /= (double) q;
  double growth = (rss1 - rss0) - (live1 - live0);
  double margin = rss0 * 0.10 > 16384 ? rss0 * 0.10 : 16384;
  printf ("stress: soak: RSS mean first quarter %.0f KiB (program's blocks %.0f KiB), last quarter"
          " %.0f KiB (%.0f KiB); allocator's own growth %+.0f KiB, allowed %.0f KiB\n",
          rss0, live0, rss1, live1, growth, margin);
  if (growth > margin)
    die ("soak: RSS grew by %.0f KiB beyond the program's own blocks (allowed %.0f KiB)", growth,
         margin);
}

static void
start_worker (struct worker *w, uint64_t *rng)
{
  w->serial = ++next_serial;
  w->rng = rnd (rng);
  w->lifetime = 2000 + rnd (rng) % 20000;
  atomic_store (&w->done, 0);
  w->running = 1;
  int rc = pthread_create (&w->tid, NULL, worker_main, w);
  if (rc != 0)
    die ("pthread_create: %s", strerror (rc));
  atomic_fetch_add_explicit (&n_threads_made, 1, memory_order_relaxed);
}

/* The monitor thread: the watchdog, and in a soak the RSS samples. Not
 * the main thread: it waits in pthread_join for each ending worker, which
 * with hundreds of threads on two cores can take seconds to run its exit. */
static struct sample *samples;
static size_t n_samples, max_samples;
static atomic_int monitor_quit;
static double t_start;

static void
take_sample (void)
{
  struct sample *sm = &samples[n_samples++];
  sm->rss_kib = rss_kib ();
  sm->live_kib = atomic_load (&live_bytes) / 1024;
  if (sm->rss_kib < 0)
    die ("soak: cannot read VmRSS from /proc/self/status");
  if (n_samples % (opt_verbose ? 5 : 60) == 0)
    {
      printf ("stress: soak: %4.0f s: RSS %ld KiB, program's blocks %" PRId64 " KiB, %" PRIuFAST64
              " allocs, %" PRIuFAST64 " threads made\n",
              now () - t_start, sm->rss_kib, sm->live_kib, atomic_load (&n_allocs),
              atomic_load (&n_threads_made));
      fflush (stdout);
    }
}

/* Ends the run when the progress counter has not moved for opt_watchdog
 * seconds: some thread waits for a lock nobody will release, or the
 * scheduler never lets the holder run. */
static void *
monitor_main (void *arg)
{
  (void) arg;
  uint_fast64_t seen = atomic_load (&progress);
  double since = now (), next_sample = t_start + 1;
  while (!atomic_load (&monitor_quit))
    {
      usleep (100 * 1000);
      double t = now ();
      uint_fast64_t p = atomic_load (&progress);
      if (p != seen)
        {
          seen = p;
          since = t;
        }
      else if (t - since >= opt_watchdog)
        die ("no thread made progress for %.0f s (a hang: a lock never released?)", opt_watchdog);
      /* here too, not only in the main thread, which may sit in a join */
      if (opt_seconds > 0 && t - t_start >= opt_seconds)
        atomic_store (&stop, 1);
      if (samples && t >= next_sample && !atomic_load (&stop) && n_samples < max_samples)
        {
          take_sample ();
          next_sample += 1;
        }
    }
  return NULL;
}

static void __attribute__ ((noreturn))
usage (void)
{
  fprintf (stderr,
           "usage: stress [--threads N] [--seconds S | --iterations N] [--seed X] [--verbose]\n"
           "              [--soak S]    (S seconds; RSS sampled every second must stay flat)\n"
           "              [--watchdog S] (fail when no thread progresses for S s; default 60)\n"
           "              [--corrupt]   (damage one block on purpose: must fail)\n"
           "  default: 4 threads, 5 seconds, seed 1; threads 1 to 1024\n");
  exit (2);
}

int
main (int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    {
      const char *a = argv[i];
      if (!strcmp (a, "--verbose") || !strcmp (a, "-v"))
        {
          opt_verbose = 1;
          continue;
        }
      if (!strcmp (a, "--corrupt"))
        {
          opt_corrupt = 1;
          continue;
        }
      if (i + 1 >= argc)
        usage ();
      const char *v = argv[++i];
      char *end = NULL;
      if (!strcmp (a, "--threads"))
        opt_threads = (int) strtol (v, &end, 0);
      else if (!strcmp (a, "--seconds"))
        opt_seconds = strtod (v, &end);
      else if (!strcmp (a, "--iterations"))
        opt_iterations = strtoull (v, &end, 0);
      else if (!strcmp (a, "--seed"))
        opt_seed = strtoull (v, &end, 0);
      else if (!strcmp (a, "--soak"))
        {
          opt_seconds = strtod (v, &end);
          opt_soak = 1;
        }
      else if (!strcmp (a, "--watchdog"))
        opt_watchdog = strtod (v, &end);
      else
        usage ();
      if (*end)
        usage ();
    }
  if (opt_threads < 1 || opt_threads > MAX_THREADS)
    usage ();
  if (opt_soak && (opt_iterations || opt_seconds <= 0))
    usage ();
  if (opt_seconds <= 0 && !opt_iterations)
    opt_seconds = 5;
  if (opt_watchdog <= 0)
    usage ();

  n_local = LIVE_BLOCKS / opt_threads;
  if (n_local > LOCAL_SLOTS)
    n_local = LOCAL_SLOTS;
  if (n_local < MIN_LOCAL_SLOTS)
    n_local = MIN_LOCAL_SLOTS;
  n_shared = (size_t) opt_threads * SHARED_PER_THREAD;
  if (n_shared > MAX_SHARED)
    n_shared = MAX_SHARED;
  shared = calloc (n_shared, sizeof *shared);
  if (!shared)
    die ("no memory for the shared array");
  for (size_t i = 0; i < n_shared; i++)
    pthread_mutex_init (&shared[i].lock, NULL);

  printf ("stress: %d threads, %s %g, seed %" PRIu64 "; %d blocks per thread, %zu shared%s\n",
          opt_threads, opt_iterations ? "iterations" : "seconds",
          opt_iterations ? (double) opt_iterations : opt_seconds, opt_seed, n_local, n_shared,
          opt_soak ? "; soak: RSS sampled every second" : "");
  fflush (stdout);

  max_samples = opt_soak ? (size_t) opt_seconds + 16 : 0;
  if (opt_soak && !(samples = calloc (max_samples, sizeof *samples)))
    die ("no memory for the RSS samples");

  uint64_t rng = mix (opt_seed);
  struct worker *ws = calloc ((size_t) opt_threads, sizeof *ws);
  double t0 = now (), last_report = t0;
  t_start = t0;
  pthread_t monitor;
  int mrc = pthread_create (&monitor, NULL, monitor_main, NULL);
  if (mrc != 0)
    die ("pthread_create (monitor): %s", strerror (mrc));
  for (int i = 0; i < opt_threads; i++)
    start_worker (&ws[i], &rng);

  /* Replace each worker as soon as it ends, while the others run on. */
  int alive = opt_threads;
  while (alive > 0)
    {
      if (opt_seconds > 0 && now () - t0 >= opt_seconds)
        atomic_store (&stop, 1);
      int stopping = atomic_load (&stop);
      int progressed = 0;
      for (int i = 0; i < opt_threads; i++)
        {
          if (!ws[i].running || !atomic_load (&ws[i].done))
            continue;
          pthread_join (ws[i].tid, NULL);
          ws[i].running = 0;
          progressed = 1;
          if (stopping)
            alive--;
          else
            start_worker (&ws[i], &rng);
        }
      if (opt_verbose && now () - last_report >= 1)
        {
          last_report = now ();
          fprintf (stderr, "  %.0fs: %" PRIuFAST64 " allocs, %" PRIuFAST64 " threads\n",
                   last_report - t0, atomic_load (&n_allocs), atomic_load (&n_threads_made));
        }
      if (!progressed)
        usleep (2000);
    }

  /* Everything left in the shared array must still be intact. */
  atomic_store (&monitor_quit, 1);
  pthread_join (monitor, NULL);
  size_t left = 0;
  for (size_t i = 0; i < n_shared; i++)
    if (shared[i].b.p)
      {
        free_block (&shared[i].b, 0, "final free");
        left++;
      }

  double secs = now () - t0;
  if (opt_soak)
    check_rss (samples, n_samples);
  printf ("stress: OK: %.1f s, %.0f allocs/s, %" PRIuFAST64 " allocs, %" PRIuFAST64
          " frees (%" PRIuFAST64 " remote), %" PRIuFAST64 " reallocs, %" PRIuFAST64 " transfers, %" PRIuFAST64
          " threads, %zu blocks outlived their thread, %.1f MiB verified\n",
          secs, (double) atomic_load (&n_allocs) / secs, atomic_load (&n_allocs),
          atomic_load (&n_frees), atomic_load (&n_remote_frees),
          atomic_load (&n_reallocs), atomic_load (&n_transfers), atomic_load (&n_threads_made),
          left, (double) atomic_load (&bytes_checked) / (double) MiB);
  if (atomic_load (&n_allocs) != atomic_load (&n_frees))
    die ("%" PRIuFAST64 " allocations but %" PRIuFAST64 " frees", atomic_load (&n_allocs),
         atomic_load (&n_frees));
  free (samples);
  free (ws);
  for (size_t i = 0; i < n_shared; i++)
    pthread_mutex_destroy (&shared[i].lock);
  free (shared);
  return 0;
}
