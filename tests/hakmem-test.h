/* Shared helpers for the hakmem GTest suites.
 *
 * T(name) is the allocator entry point under test: the standard name
 * (malloc, free, ...) when the library interposes the malloc API, or the
 * hak_* name when it is built with -Dinterpose=false. Every suite calls the
 * allocator through T() so the same source tests both builds. */
#ifndef HAKMEM_TEST_H
#define HAKMEM_TEST_H

#include <glib.h>

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hakmem.h"

#ifndef HT_INTERPOSE
#define HT_INTERPOSE 1
#endif
#ifndef HT_DEFAULT_FRONT
#define HT_DEFAULT_FRONT "tcache"
#endif
#ifndef HT_DEFAULT_SAFETY
#define HT_DEFAULT_SAFETY "registry"
#endif
#ifndef HT_MINCORE_ENABLED
#define HT_MINCORE_ENABLED 0
#endif
#ifndef HT_POOL_ENABLED
#define HT_POOL_ENABLED 0
#endif
#define HT_DEFAULT_POOL (HT_POOL_ENABLED ? "tls" : "none")
#ifndef HT_LARGE_DIRECT_ENABLED
#define HT_LARGE_DIRECT_ENABLED 0
#endif
#ifndef HT_DEFAULT_LARGE
#define HT_DEFAULT_LARGE "cached"
#endif
#ifndef HT_DEFAULT_SUPERSLAB
#define HT_DEFAULT_SUPERSLAB "pages"
#endif
#ifndef HT_HUGEPAGE_ENABLED
#define HT_HUGEPAGE_ENABLED 0
#endif

/* 1 when the safety box in use is hardened (HAKMEM_SAFETY, or the
 * build's default when unset): every call misses the bins, blocks carry
 * guards (a larger class than the request's, a guard page after large
 * ones) and freed blocks wait in a quarantine. */
static inline int
ht_safety_hardened (void)
{
  const char *safety = g_getenv ("HAKMEM_SAFETY");
  if (!safety || !*safety)
    safety = HT_DEFAULT_SAFETY;
  return strcmp (safety, "hardened") == 0;
}

/* 1 unless the hardened box is in use, whose block layout and delayed
 * reuse a test of the plain layout does not hold for; then marks the
 * calling test skipped, saying why. */
static inline int
ht_plain_blocks_or_skip (const char *why)
{
  if (!ht_safety_hardened ())
    return 1;
  g_test_skip (why);
  return 0;
}

/* 1 when mid sizes go through the Pool TLS box's per-thread bins: built in
 * and not turned off with HAKMEM_POOL=none (nor by the hardened safety box). Otherwise marks the calling
 * test skipped, saying why (the reason is the test's own). */
static inline int
ht_pool_bins_or_skip (const char *why)
{
  const char *pool = g_getenv ("HAKMEM_POOL");
  if (HT_POOL_ENABLED && !(pool && strcmp (pool, "none") == 0) && !ht_safety_hardened ())
    return 1;
  g_test_skip (why);
  return 0;
}

/* 1 when pages inside a SuperSlab in use go back to the OS on their own
 * (free slabs, hollow runs): the pages SuperSlab box. The hugepage box
 * gives pages back only with whole SuperSlabs; under it, marks the calling
 * test skipped, saying why. */
static inline int
ht_partial_purge_or_skip (const char *why)
{
  const char *ss = g_getenv ("HAKMEM_SUPERSLAB");
  if (!ss || (strcmp (ss, "pages") && strcmp (ss, "hugepage")))
    ss = HT_DEFAULT_SUPERSLAB;   /* unset or refused: the build's default */
  if (strcmp (ss, "hugepage") != 0)
    return 1;
  g_test_skip (why);
  return 0;
}

/* The same for tiny sizes and the front cache box (HAKMEM_FRONT=none
 * leaves it out; the hardened safety box gives bins no room). */
static inline int
ht_front_bins_or_skip (const char *why)
{
  const char *front = g_getenv ("HAKMEM_FRONT");
  if (!(front && strcmp (front, "none") == 0) && !ht_safety_hardened ())
    return 1;
  g_test_skip (why);
  return 0;
}

/* 1 when freed large blocks go to the cached large path's cache: the
 * large box in use is `cached` (HAKMEM_LARGE, or the build's default
 * when unset or not built). Otherwise marks the calling test skipped. */
static inline int
ht_large_cache_or_skip (const char *why)
{
  const char *large = g_getenv ("HAKMEM_LARGE");
  if (!large || !HT_LARGE_DIRECT_ENABLED)
    large = HT_DEFAULT_LARGE;
  if (strcmp (large, "cached") == 0)
    return 1;
  g_test_skip (why);
  return 0;
}

/* 1 when built with ThreadSanitizer (GCC defines __SANITIZE_THREAD__, clang
 * has __has_feature(thread_sanitizer)). */
#if defined(__SANITIZE_THREAD__)
#define HT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HT_TSAN 1
#endif
#endif
#ifndef HT_TSAN
#define HT_TSAN 0
#endif

#if HT_INTERPOSE
/* C23 functions; glibc 2.36 does not declare them yet. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);
#define T(fn) fn
#else
#define T(fn) hak_##fn
#endif

/* glibc's own allocator, reachable whatever malloc is interposed. */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *ptr);

#if HT_TSAN
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* This ThreadSanitizer runtime does not intercept mremap, which hakmem uses
 * to grow and move large blocks. The range a move vacates keeps the accesses
 * made there before the move, so the next thread that gets those pages
 * (an in-place mremap growth does not go through the mmap interceptor that
 * would reset them) is reported as racing with them. The kernel serializes
 * every mremap on the address-space lock; model that lock with one TSan sync
 * object, so that whatever a thread did before its mremap happens before
 * whatever the next mremap caller does after it. The executable's mremap
 * takes precedence over libc's for libhakmem.so too. */
static char ht_tsan_mm_lock;
extern void __tsan_acquire (void *addr);
extern void __tsan_release (void *addr);

void *mremap (void *old_address, size_t old_size, size_t new_size, int flags, ...);
void *
mremap (void *old_address, size_t old_size, size_t new_size, int flags, ...)
{
  void *new_address = NULL;
  if (flags & MREMAP_FIXED)
    {
      va_list ap;
      va_start (ap, flags);
      new_address = va_arg (ap, void *);
      va_end (ap);
    }
  __tsan_release (&ht_tsan_mm_lock);
  long r = syscall (SYS_mremap, old_address, old_size, new_size, flags,
                    new_address);
  __tsan_acquire (&ht_tsan_mm_lock);
  return r == -1 ? MAP_FAILED : (void *) r;
}
#endif

#define HT_KiB ((size_t)1024)
#define HT_MiB ((size_t)1024 * 1024)

/* Hides a value from the optimizer so that it cannot reason about the
 * allocation calls (constant-fold huge sizes, pair malloc/free, warn about a
 * use after realloc we mean to do). */
static inline size_t
ht_opaque (size_t x)
{
  __asm__ volatile ("" : "+r" (x));
  return x;
}

static inline void *
ht_hide (void *p)
{
  __asm__ volatile ("" : "+r" (p));
  return p;
}

static inline uint64_t
ht_mix (uint64_t x)
{
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* A small per-thread-usable PRNG. */
static inline uint64_t
ht_rand (uint64_t *state)
{
  *state = ht_mix (*state);
  return *state;
}

/* Byte at offset i of the pattern identified by seed. Two different seeds give
 * different bytes at almost every offset, so a block written over by another
 * block is detected. */
static inline unsigned char
ht_pattern_byte (uint64_t base, size_t i)
{
  uint64_t w = base ^ ((uint64_t) (i & ~(size_t) 7) * 0x9E3779B97F4A7C15ull);
  return (unsigned char) (w >> ((i & 7) * 8));
}

static inline void
ht_fill (void *p, size_t n, uint64_t seed)
{
  unsigned char *b = p;
  uint64_t base = ht_mix (seed);
  size_t i = 0;

  if (((uintptr_t) b & 7) == 0)
    {
      uint64_t *w = (uint64_t *) (void *) b;
      for (; i + 8 <= n; i += 8)
        w[i / 8] = base ^ ((uint64_t) i * 0x9E3779B97F4A7C15ull);
    }
  for (; i < n; i++)
    b[i] = ht_pattern_byte (base, i);
}

/* Returns the offset of the first byte that differs from the pattern, or
 * SIZE_MAX when the whole range is intact. */
static inline size_t
ht_check (const void *p, size_t n, uint64_t seed)
{
  const unsigned char *b = p;
  uint64_t base = ht_mix (seed);
  size_t i = 0;

  if (((uintptr_t) b & 7) == 0)
    {
      const uint64_t *w = (const uint64_t *) (const void *) b;
      for (; i + 8 <= n; i += 8)
        if (w[i / 8] != (base ^ ((uint64_t) i * 0x9E3779B97F4A7C15ull)))
          break;
    }
  for (; i < n; i++)
    if (b[i] != ht_pattern_byte (base, i))
      return i;
  return SIZE_MAX;
}

#define ht_assert_pattern(p, n, seed)                                       \
  G_STMT_START                                                              \
  {                                                                         \
    size_t ht_bad_ = ht_check ((p), (n), (seed));                           \
    if (ht_bad_ != SIZE_MAX)                                                \
      g_error ("%s:%d: pattern of block %p (%zu bytes, seed %llu) damaged " \
               "at offset %zu",                                             \
               __FILE__, __LINE__, (void *) (p), (size_t) (n),              \
               (unsigned long long) (seed), ht_bad_);                       \
  }                                                                         \
  G_STMT_END

static inline gboolean
ht_all_bytes (const void *p, size_t n, unsigned char v)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != v)
      return FALSE;
  return TRUE;
}

#define ht_assert_aligned(p, a)                                             \
  G_STMT_START                                                              \
  {                                                                         \
    if (((uintptr_t) (p) & ((uintptr_t) (a) - 1)) != 0)                    \
      g_error ("%s:%d: %p is not %zu-byte aligned", __FILE__, __LINE__,     \
               (void *) (p), (size_t) (a));                                 \
  }                                                                         \
  G_STMT_END

/* Address ranges [start, end) of live blocks, checked pairwise disjoint. */
typedef struct
{
  uintptr_t start;
  uintptr_t end;
} HtRange;

static inline int
ht_range_cmp (const void *a, const void *b)
{
  const HtRange *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

static inline void
ht_assert_disjoint (HtRange *r, size_t n)
{
  qsort (r, n, sizeof *r, ht_range_cmp);
  for (size_t i = 1; i < n; i++)
    if (r[i - 1].end > r[i].start)
      g_error ("live blocks overlap: [%#lx, %#lx) and [%#lx, %#lx)",
               (unsigned long) r[i - 1].start, (unsigned long) r[i - 1].end,
               (unsigned long) r[i].start, (unsigned long) r[i].end);
}

/* Resident set size of this process in bytes (from /proc/self/statm). */
static inline size_t
ht_rss_bytes (void)
{
  unsigned long size = 0, resident = 0;
  FILE *f = fopen ("/proc/self/statm", "r");
  g_assert_nonnull (f);
  g_assert_cmpint (fscanf (f, "%lu %lu", &size, &resident), ==, 2);
  fclose (f);
  return (size_t) resident * (size_t) sysconf (_SC_PAGESIZE);
}

/* Small allocations of one 176-byte class, 1,024 at once (176 KiB; a
 * bin holds 32 KiB), then freed: the thread's heap misses, and a heap
 * looks at its clock (HAKMEM_DECAY_MS) on its misses only. */
static inline void
ht_keep_allocating (void)
{
  void *p[1024];
  for (size_t k = 0; k < G_N_ELEMENTS (p); k++)
    g_assert_nonnull (p[k] = T (malloc) (176));
  for (size_t k = 0; k < G_N_ELEMENTS (p); k++)
    T (free) (p[k]);
}

/* TRUE in the fresh process that runs the calling test, with
 * HAKMEM_DECAY_MS=ms in its environment when ms is not NULL (the
 * allocator reads it once, at start-up); in the parent, starts that
 * process, checks that it passed and returns FALSE. */
static inline gboolean
ht_in_process_with_decay (const char *ms)
{
  if (g_test_subprocess ())
    return TRUE;
  if (ms)
    g_setenv ("HAKMEM_DECAY_MS", ms, TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  return FALSE;
}

/* Frees every key of a set of blocks, then the set. */
static inline void
ht_free_keys_and_destroy (GHashTable *blocks)
{
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init (&it, blocks);
  while (g_hash_table_iter_next (&it, &key, NULL))
    T (free) (key);
  g_hash_table_destroy (blocks);
}

/* The allocator's figures now (hak_stats_get, the whole struct). Reading
 * them allocates nothing. */
static inline struct hak_stats
ht_stats (void)
{
  struct hak_stats s;
  g_assert_cmpint (hak_stats_get (&s, sizeof s), ==, (int) sizeof s);
  return s;
}

/* n blocks of `size` bytes into b[], each written in full with `byte`. */
static inline void
ht_alloc_filled (void **b, size_t n, size_t size, int byte)
{
  for (size_t i = 0; i < n; i++)
    {
      b[i] = T (malloc) (size);
      g_assert_nonnull (b[i]);
      memset (b[i], byte, size);
    }
}

/* The size of the class malloc(size) takes: the smallest usable size of
 * 16 blocks, as a free block of a larger class may stand in for one (at
 * most 8 misses of a class a thread, front/front.h). */
static inline size_t
ht_class_size (size_t size)
{
  void *p[16];
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < G_N_ELEMENTS (p); i++)
    {
      p[i] = T (malloc) (size);
      g_assert_nonnull (p[i]);
      size_t us = T (malloc_usable_size) (p[i]);
      best = us < best ? us : best;
    }
  for (size_t i = 0; i < G_N_ELEMENTS (p); i++)
    T (free) (p[i]);
  return best;
}

/* TRUE in a fresh process that runs the calling test case (with the
 * allocator's state of a new process); in the test's own process, starts
 * it, checks that it passed and returns FALSE. */
static inline gboolean
ht_in_fresh_process (void)
{
  if (g_test_subprocess ())
    return TRUE;
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  return FALSE;
}

/* A stage two threads step through, one setting it, the other waiting
 * for it. pthread's lock and condition, not GLib's: TSan sees only the
 * former as synchronisation. */
typedef struct
{
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stage;
} ht_stage;
#define HT_STAGE_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 }

static inline void
ht_stage_set (ht_stage *s, int stage)
{
  pthread_mutex_lock (&s->lock);
  s->stage = stage;
  pthread_cond_broadcast (&s->cond);
  pthread_mutex_unlock (&s->lock);
}

static inline void
ht_stage_wait (ht_stage *s, int stage)
{
  pthread_mutex_lock (&s->lock);
  while (s->stage != stage)
    pthread_cond_wait (&s->cond, &s->lock);
  pthread_mutex_unlock (&s->lock);
}

#endif
