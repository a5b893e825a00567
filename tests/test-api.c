/* api: the malloc API's contract (glibc semantics) as served by hakmem. */
#include "hakmem-test.h"

#include <pthread.h>
#include <sys/sysinfo.h>

static void
test_malloc_zero (void)
{
  void *a = T (malloc) (ht_opaque (0));
  void *b = T (malloc) (ht_opaque (0));

  g_assert_nonnull (a);
  g_assert_nonnull (b);
  g_assert_true (a != b);
  ht_assert_aligned (a, 16);
  g_assert_cmpint (hak_owns (a), ==, 1);
  T (free) (a);
  T (free) (b);
}

static void
test_malloc_small (void)
{
  for (size_t n = 1; n <= 2048; n = n * 2 + 1)
    {
      unsigned char *p = T (malloc) (n);
      g_assert_nonnull (p);
      ht_assert_aligned (p, 16);
      g_assert_cmpuint (T (malloc_usable_size) (p), >=, n);
      memset (p, 0x5c, n);
      g_assert_true (ht_all_bytes (p, n, 0x5c));
      g_assert_cmpint (hak_owns (p), ==, 1);
      T (free) (p);
    }
}

static void
test_malloc_huge (void)
{
  const size_t sizes[] = {
    SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4096, SIZE_MAX - 2 * HT_MiB,
    SIZE_MAX / 2 + 1, (size_t) PTRDIFF_MAX + 1,
  };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      errno = 0;
      void *p = T (malloc) (ht_opaque (sizes[i]));
      int e = errno;
      if (p)
        g_error ("malloc(%zu) returned %p, expected NULL", sizes[i], p);
      g_assert_cmpint (e, ==, ENOMEM);
    }
  /* The allocator still works after refusing. */
  void *p = T (malloc) (100);
  g_assert_nonnull (p);
  T (free) (p);
}

/* The kernel's overcommit mode (/proc/sys/vm/overcommit_memory), -1 if
 * unreadable. */
static int
overcommit_mode (void)
{
  FILE *f = fopen ("/proc/sys/vm/overcommit_memory", "r");
  int mode = -1;
  if (f)
    {
      if (fscanf (f, "%d", &mode) != 1)
        mode = -1;
      fclose (f);
    }
  return mode;
}

/* A size the address space can hold but RAM and swap cannot: glibc's
 * malloc gets ENOMEM from the kernel for it (the overcommit heuristic
 * refuses one mapping larger than both together), and so must hakmem,
 * rather than hand out a block the process is killed for touching
 * (a MAP_NORESERVE mapping would skip that check). */
static void
test_malloc_beyond_memory (void)
{
  int mode = overcommit_mode ();
  if (mode != 0 && mode != 2)
    {
      g_test_skip ("vm.overcommit_memory is not 0 or 2: the kernel maps any size");
      return;
    }
  struct sysinfo si;
  g_assert_cmpint (sysinfo (&si), ==, 0);
  size_t memory = ((size_t) si.totalram + (size_t) si.totalswap) * si.mem_unit;
  size_t size = 2 * memory + 64 * HT_MiB;
  if (size > ((size_t) 1 << 45))
    {
      g_test_skip ("RAM and swap above 16 TiB: no such size fits the address space");
      return;
    }
  errno = 0;
  void *p = T (malloc) (ht_opaque (size));
  int e = errno;
  if (p)
    g_error ("malloc(%zu) with %zu bytes of RAM and swap returned %p, expected NULL",
             size, memory, p);
  g_assert_cmpint (e, ==, ENOMEM);
  errno = 0;
  g_assert_null (T (calloc) (ht_opaque (size / 16), 16));
  g_assert_cmpint (errno, ==, ENOMEM);
  void *q = T (malloc) (ht_opaque (HT_MiB));
  g_assert_nonnull (q);
  errno = 0;
  g_assert_null (T (realloc) (q, ht_opaque (size)));
  g_assert_cmpint (errno, ==, ENOMEM);
  T (free) (q);
}

/* SuperSlabs released from heaps so far (hak_stats_get). */
static unsigned long long
stats_superslabs_released (void)
{
  return ht_stats ().ss_released;
}

/* A size no memory could satisfy is refused as it is: the caches stay.
 * (A refused mapping makes the thread's caches, empty runs and SuperSlabs
 * go back before one more try, api/pressure.c; for such a size, every
 * one of them would then be mapped again for nothing.) */
static void *
huge_in_fresh_heap (void *arg)
{
  (void) arg;
  /* a new thread's heap: one SuperSlab, whose only run has its one block
   * cached in this thread's bin, so that a release would free it all */
  void *p = T (malloc) (3000);
  g_assert_nonnull (p);
  T (free) (p);
  unsigned long long before = stats_superslabs_released ();
  for (int i = 0; i < 100; i++)
    {
      errno = 0;
      g_assert_null (T (malloc) (ht_opaque (SIZE_MAX / 2)));
      g_assert_cmpint (errno, ==, ENOMEM);
    }
  g_assert_cmpuint (stats_superslabs_released (), ==, before);
  return NULL;
}

static void
test_malloc_huge_keeps_caches (void)
{
  if (!ht_in_fresh_process ())
    return;
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, huge_in_fresh_heap, NULL), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
}

static void
test_free_null (void)
{
  T (free) (NULL);
  T (free) (ht_hide (NULL));
  T (free_sized) (NULL, 0);
  T (free_aligned_sized) (NULL, 64, 0);
}

/* POSIX.1-2024 (and glibc >= 2.33): free() does not change errno. */
static void
test_free_preserves_errno (void)
{
  const size_t sizes[] = { 16, 1000, 100000, 4 * HT_MiB };
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      void *p = T (malloc) (sizes[i]);
      g_assert_nonnull (p);
      errno = 4242;
      T (free) (p);
      g_assert_cmpint (errno, ==, 4242);
    }
  errno = 4243;
  T (free) (NULL);
  g_assert_cmpint (errno, ==, 4243);
}

static void
check_calloc_zero (size_t nmemb, size_t size)
{
  size_t n = nmemb * size;
  unsigned char *p = T (calloc) (nmemb, size);
  g_assert_nonnull (p);
  ht_assert_aligned (p, 16);
  if (!ht_all_bytes (p, n, 0))
    g_error ("calloc(%zu, %zu) returned memory that is not zero", nmemb, size);
  memset (p, 0xAA, n);
  T (free) (p);
}

static void
test_calloc_zeroes (void)
{
  const size_t sizes[] = {
    1, 8, 16, 24, 100, 128, 500, 1024, 1025, 4096, 10000, 65536, 200000,
    256 * HT_KiB, 256 * HT_KiB + 1, 300000, HT_MiB, 3 * HT_MiB + 5,
    16 * HT_MiB,
  };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    check_calloc_zero (1, sizes[i]);
  check_calloc_zero (1000, 3);
  check_calloc_zero (3, 100000);
}

/* calloc must zero memory recycled from a freed, dirtied block of the same
 * size (tcache, slab, and the large-span cache). */
static void
test_calloc_dirty_reuse (void)
{
  const size_t sizes[] = {
    16, 48, 128, 160, 1000, 1024, 2048, 5000, 40000, 200000,
    300000, 2 * HT_MiB, 8 * HT_MiB,
  };

  for (int round = 0; round < 4; round++)
    for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
      {
        size_t n = sizes[i];
        /* Several at once so the frees fill the caches. */
        unsigned char *dirty[8];
        for (int k = 0; k < 8; k++)
          {
            dirty[k] = T (malloc) (n);
            g_assert_nonnull (dirty[k]);
            memset (dirty[k], 0xAA, T (malloc_usable_size) (dirty[k]));
          }
        for (int k = 7; k >= 0; k--)
          T (free) (dirty[k]);
        for (int k = 0; k < 8; k++)
          {
            dirty[k] = T (calloc) (1, n);
            g_assert_nonnull (dirty[k]);
            if (!ht_all_bytes (dirty[k], n, 0))
              g_error ("calloc(1, %zu) after free of a dirty block is not zero", n);
          }
        for (int k = 0; k < 8; k++)
          T (free) (dirty[k]);
      }
}

static void
test_calloc_overflow (void)
{
  const size_t cases[][2] = {
    { SIZE_MAX, 2 },
    { 2, SIZE_MAX },
    { SIZE_MAX / 2 + 1, 2 },
    { (size_t) 1 << 33, (size_t) 1 << 33 },
    { SIZE_MAX / 16 + 1, 16 },
    { 65537, SIZE_MAX / 65536 },
    { SIZE_MAX, SIZE_MAX },
  };

  for (size_t i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      errno = 0;
      void *p = T (calloc) (ht_opaque (cases[i][0]), ht_opaque (cases[i][1]));
      int e = errno;
      if (p)
        g_error ("calloc(%zu, %zu) returned %p, expected NULL", cases[i][0],
                 cases[i][1], p);
      g_assert_cmpint (e, ==, ENOMEM);
    }
  /* Huge but not overflowing: still ENOMEM. */
  errno = 0;
  g_assert_null (T (calloc) (ht_opaque (SIZE_MAX / 2), 1));
  g_assert_cmpint (errno, ==, ENOMEM);

  /* Zero-sized calloc returns a freeable pointer. */
  void *a = T (calloc) (ht_opaque (0), 16);
  void *b = T (calloc) (16, ht_opaque (0));
  void *c = T (calloc) (ht_opaque (0), ht_opaque (0));
  g_assert_nonnull (a);
  g_assert_nonnull (b);
  g_assert_nonnull (c);
  T (free) (a);
  T (free) (b);
  T (free) (c);
}

static void
test_realloc_null (void)
{
  const size_t sizes[] = { 0, 1, 100, 5000, 400000 };
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      unsigned char *p = T (realloc) (ht_hide (NULL), sizes[i]);
      g_assert_nonnull (p);
      ht_assert_aligned (p, 16);
      g_assert_cmpuint (T (malloc_usable_size) (p), >=, sizes[i]);
      g_assert_cmpint (hak_owns (p), ==, 1);
      memset (p, 1, sizes[i]);
      T (free) (p);
    }
}

/* glibc: realloc(p, 0) frees p and returns NULL. */
static void
test_realloc_zero (void)
{
  const size_t sizes[] = { 1, 100, 5000, 400000, 4 * HT_MiB };
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      void *p = T (malloc) (sizes[i]);
      g_assert_nonnull (p);
      void *q = T (realloc) (p, ht_opaque (0));
      if (q)
        g_error ("realloc(%p /* %zu bytes */, 0) returned %p, expected NULL",
                 p, sizes[i], q);
    }
  /* Many rounds: if realloc(p, 0) leaked, RSS would grow by ~1 GiB. */
  size_t rss0 = ht_rss_bytes ();
  for (int i = 0; i < 256; i++)
    {
      unsigned char *p = T (malloc) (4 * HT_MiB);
      g_assert_nonnull (p);
      memset (p, 7, 4 * HT_MiB);
      g_assert_null (T (realloc) (p, ht_opaque (0)));
    }
  size_t rss1 = ht_rss_bytes ();
  if (rss1 > rss0 + 256 * HT_MiB)
    g_error ("RSS grew from %zu to %zu bytes: realloc(p, 0) does not free p",
             rss0, rss1);
}

static void
test_reallocarray (void)
{
  unsigned char *p = T (reallocarray) (ht_hide (NULL), 10, 10);
  g_assert_nonnull (p);
  ht_fill (p, 100, 1);
  p = T (reallocarray) (p, 1000, 10);
  g_assert_nonnull (p);
  ht_assert_pattern (p, 100, 1);
  ht_fill (p, 10000, 2);

  const size_t bad[][2] = {
    { SIZE_MAX, 2 },
    { (size_t) 1 << 33, (size_t) 1 << 33 },
    { SIZE_MAX / 8 + 1, 8 },
  };
  for (size_t i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      errno = 0;
      void *q = T (reallocarray) (ht_hide (p), ht_opaque (bad[i][0]),
                                  ht_opaque (bad[i][1]));
      int e = errno;
      if (q)
        g_error ("reallocarray(p, %zu, %zu) returned %p, expected NULL",
                 bad[i][0], bad[i][1], q);
      g_assert_cmpint (e, ==, ENOMEM);
      /* The old block is untouched and still ours. */
      ht_assert_pattern (p, 10000, 2);
      g_assert_cmpint (hak_owns (p), ==, 1);
      g_assert_cmpuint (T (malloc_usable_size) (p), >=, 10000);
    }
  /* Overflowing reallocarray of NULL allocates nothing. */
  errno = 0;
  g_assert_null (T (reallocarray) (ht_hide (NULL), ht_opaque (SIZE_MAX), 16));
  g_assert_cmpint (errno, ==, ENOMEM);

  p = T (reallocarray) (p, 3, 7);
  g_assert_nonnull (p);
  ht_assert_pattern (p, 21, 2);
  T (free) (p);
}

static void
test_realloc_huge_fails (void)
{
  unsigned char *p = T (malloc) (1000);
  g_assert_nonnull (p);
  ht_fill (p, 1000, 3);
  errno = 0;
  void *q = T (realloc) (ht_hide (p), ht_opaque (SIZE_MAX - 64));
  int e = errno;
  g_assert_null (q);
  g_assert_cmpint (e, ==, ENOMEM);
  ht_assert_pattern (p, 1000, 3);
  g_assert_cmpint (hak_owns (p), ==, 1);
  T (free) (p);
}

static void
test_posix_memalign_einval (void)
{
  const size_t bad[] = { 0, 1, 2, 3, 4, sizeof (void *) / 2, 12, 24, 48, 100,
                         4095, 4097, 3 * 4096, (size_t) 1 << 63 | 16 };
  for (size_t i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      void *p = (void *) 0x1;
      errno = 777;
      int rc = T (posix_memalign) (&p, ht_opaque (bad[i]), 64);
      if (rc != EINVAL)
        g_error ("posix_memalign(alignment %zu) returned %d, expected EINVAL",
                 bad[i], rc);
      g_assert_cmpint (errno, ==, 777);
    }
  /* Success returns 0, leaves errno alone. */
  void *p = NULL;
  errno = 778;
  g_assert_cmpint (T (posix_memalign) (&p, sizeof (void *), 10), ==, 0);
  g_assert_cmpint (errno, ==, 778);
  g_assert_nonnull (p);
  ht_assert_aligned (p, sizeof (void *));
  T (free) (p);

  /* Too large: ENOMEM as the return value, errno untouched. */
  p = NULL;
  errno = 779;
  g_assert_cmpint (T (posix_memalign) (&p, 64, ht_opaque (SIZE_MAX - 32)), ==,
                   ENOMEM);
  g_assert_cmpint (errno, ==, 779);
}

static void
test_aligned_alloc_einval (void)
{
  const size_t bad[] = { 3, 12, 24, 48, 100, 1000, 4097, 3 * 4096 };
  for (size_t i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      errno = 0;
      void *p = T (aligned_alloc) (ht_opaque (bad[i]), 256);
      int e = errno;
      if (p)
        g_error ("aligned_alloc(%zu, 256) returned %p, expected NULL", bad[i], p);
      g_assert_cmpint (e, ==, EINVAL);
    }
  /* Size not a multiple of the alignment: accepted (C17 / glibc). */
  void *p = T (aligned_alloc) (64, 100);
  g_assert_nonnull (p);
  ht_assert_aligned (p, 64);
  T (free) (p);

  errno = 0;
  g_assert_null (T (aligned_alloc) (64, ht_opaque (SIZE_MAX - 32)));
  g_assert_cmpint (errno, ==, ENOMEM);
}

/* glibc: memalign rounds a non-power-of-two alignment up to the next power
 * of two. */
static void
test_memalign_round_up (void)
{
  const size_t cases[][2] = {
    /* alignment asked, alignment expected */
    { 3, 4 }, { 24, 32 }, { 48, 64 }, { 100, 128 }, { 1000, 1024 },
    { 3000, 4096 }, { 5000, 8192 }, { 100000, 131072 }, { 600000, 1048576 },
    { 0, 1 }, { 1, 1 },
  };
  for (size_t i = 0; i < G_N_ELEMENTS (cases); i++)
    for (size_t n = 1; n <= 100000; n *= 10)
      {
        void *p = T (memalign) (ht_opaque (cases[i][0]), n);
        if (!p)
          g_error ("memalign(%zu, %zu) returned NULL", cases[i][0], n);
        if ((uintptr_t) p % cases[i][1] != 0)
          g_error ("memalign(%zu, %zu) = %p is not %zu-aligned", cases[i][0],
                   n, p, cases[i][1]);
        ht_assert_aligned (p, 16);
        g_assert_cmpuint (T (malloc_usable_size) (p), >=, n);
        memset (p, 0x11, n);
        T (free) (p);
      }
}

static void
test_valloc_pvalloc (void)
{
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);
  const size_t sizes[] = { 0, 1, 100, 4095, 4096, 4097, 5000, 65536, 300000,
                           3 * HT_MiB + 1 };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      size_t n = sizes[i];
      unsigned char *v = T (valloc) (n);
      g_assert_nonnull (v);
      ht_assert_aligned (v, page);
      g_assert_cmpuint (T (malloc_usable_size) (v), >=, n);
      memset (v, 0x22, n);

      unsigned char *pv = T (pvalloc) (n);
      g_assert_nonnull (pv);
      ht_assert_aligned (pv, page);
      size_t rounded = (n + page - 1) & ~(page - 1);
      size_t us = T (malloc_usable_size) (pv);
      if (us < rounded)
        g_error ("pvalloc(%zu): usable size %zu < %zu (size rounded up to a page)",
                 n, us, rounded);
      memset (pv, 0x33, rounded);
      g_assert_true (ht_all_bytes (v, n, 0x22));
      T (free) (v);
      T (free) (pv);
    }

  errno = 0;
  g_assert_null (T (valloc) (ht_opaque (SIZE_MAX - 16)));
  g_assert_cmpint (errno, ==, ENOMEM);
  errno = 0;
  g_assert_null (T (pvalloc) (ht_opaque (SIZE_MAX - 16)));
  g_assert_cmpint (errno, ==, ENOMEM);
}

static void
test_usable_size (void)
{
  g_assert_cmpuint (T (malloc_usable_size) (NULL), ==, 0);
  g_assert_cmpuint (hak_malloc_usable_size (NULL), ==, 0);

  for (size_t n = 0; n < 3 * HT_MiB; n = n < 64 ? n + 1 : n * 5 / 4)
    {
      unsigned char *p = T (malloc) (n);
      g_assert_nonnull (p);
      size_t us = T (malloc_usable_size) (p);
      if (us < n)
        g_error ("malloc_usable_size(malloc(%zu)) = %zu", n, us);
      /* The whole usable size belongs to the caller. */
      ht_fill (p, us, n);
      /* Stable across calls. */
      g_assert_cmpuint (T (malloc_usable_size) (p), ==, us);
      /* Growing within the usable size keeps the block in place. */
      if (us > 0)
        {
          uintptr_t orig = (uintptr_t) p;
          p = T (realloc) (p, us);
          if ((uintptr_t) p != orig)
            g_error ("realloc(malloc(%zu), usable size %zu) moved the block", n, us);
          ht_assert_pattern (p, us, n);
        }
      T (free) (p);
    }
}

/* free_sized / free_aligned_sized really free: done thousands of times on
 * touched memory, a leak would show up in the RSS. */
static void
test_free_sized (void)
{
  const size_t sizes[] = { 1, 16, 100, 1024, 3000, 65536, 200000, 1500000 };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      void *p = T (malloc) (sizes[i]);
      g_assert_nonnull (p);
      memset (p, 0x44, sizes[i]);
      T (free_sized) (p, sizes[i]);

      for (size_t a = 16; a <= HT_MiB; a <<= 2)
        {
          void *q = T (aligned_alloc) (a, sizes[i]);
          g_assert_nonnull (q);
          ht_assert_aligned (q, a);
          memset (q, 0x45, sizes[i]);
          T (free_aligned_sized) (q, a, sizes[i]);
        }
    }

  size_t rss0 = ht_rss_bytes ();
  for (int i = 0; i < 4000; i++)
    {
      size_t n = (i & 1) ? 200000 : 48000;
      void *p = T (malloc) (n);
      g_assert_nonnull (p);
      memset (p, 0x46, n);
      T (free_sized) (p, n);

      void *q = T (aligned_alloc) (4096, 100000);
      g_assert_nonnull (q);
      memset (q, 0x47, 100000);
      T (free_aligned_sized) (q, 4096, 100000);
    }
  for (int i = 0; i < 200; i++)
    {
      void *p = T (malloc) (4 * HT_MiB);
      g_assert_nonnull (p);
      memset (p, 0x48, 4 * HT_MiB);
      T (free_sized) (p, 4 * HT_MiB);
    }
  size_t rss1 = ht_rss_bytes ();
  if (rss1 > rss0 + 128 * HT_MiB)
    g_error ("RSS grew from %zu to %zu bytes: free_sized/free_aligned_sized "
             "do not free", rss0, rss1);
}

/* A free block's first word holds its link with the free mark (0xF4EE) in
 * its top 16 bits (src/base/track.h). A live block whose first word looks
 * the same, as a program may store anything, must still free normally
 * (slow path: not on any free list, so not a double free): no report, the
 * block reused, nothing handed out twice. */
static void
test_free_mark_lookalike (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  enum { N = 64 };
  static const size_t sizes[] = { 16, 48, 128, 1000, 4096, 40000, 100000 };
  for (size_t s = 0; s < G_N_ELEMENTS (sizes); s++)
    {
      void *p[N], *q[N];
      HtRange r[N];
      for (int i = 0; i < N; i++)
        {
          p[i] = T (malloc) (sizes[s]);
          g_assert_nonnull (p[i]);
          memset (p[i], 0x5a, sizes[s]);
        }
      for (int i = 0; i < N; i++)
        {
          /* what a free block's link to p[i+1] (or to nothing) looks like */
          uint64_t look = (uint64_t) (uintptr_t) (i + 1 < N ? p[i + 1] : NULL)
                          ^ ((uint64_t) 0xF4EE << 48);
          memcpy (p[i], &look, sizeof look);
        }
      for (int i = 0; i < N; i++)
        T (free) (p[i]);
      int reused = 0;
      for (int i = 0; i < N; i++)
        {
          q[i] = T (malloc) (sizes[s]);
          g_assert_nonnull (q[i]);
          memset (q[i], 0xa5, sizes[s]);
          r[i].start = (uintptr_t) q[i];
          r[i].end = r[i].start + sizes[s];
          for (int j = 0; j < N; j++)
            reused += q[i] == p[j];
        }
      ht_assert_disjoint (r, N);
      /* a free taken for a double free and dropped would leave none. Not
       * all: blocks freed past a full bin go back to their run, behind
       * free blocks that earlier tests left there, and with no thread
       * cache (HAKMEM_FRONT=none) runs that empty go back and new ones
       * may sit elsewhere */
      g_assert_cmpint (reused, >=, 1);
      for (int i = 0; i < N; i++)
        T (free) (q[i]);
    }
}

/* Many allocations of mixed sizes live at once, all distinct and owned. */
static void
test_mixed_live (void)
{
  enum { N = 5000 };
  void **p = g_new0 (void *, N);
  size_t *len = g_new0 (size_t, N);
  HtRange *r = g_new0 (HtRange, N);
  uint64_t rng = 42;

  for (int i = 0; i < N; i++)
    {
      uint64_t x = ht_rand (&rng);
      len[i] = (x % 16 == 0) ? x % (600 * HT_KiB) : x % 2000;
      p[i] = T (malloc) (len[i]);
      g_assert_nonnull (p[i]);
      ht_fill (p[i], len[i], (uint64_t) i);
      r[i].start = (uintptr_t) p[i];
      r[i].end = r[i].start + (len[i] ? len[i] : 1);
    }
  ht_assert_disjoint (r, N);
  for (int i = 0; i < N; i++)
    {
      ht_assert_pattern (p[i], len[i], (uint64_t) i);
      T (free) (p[i]);
    }
  g_free (p);
  g_free (len);
  g_free (r);
}

#if HT_INTERPOSE
/* Linking against hakmem makes malloc hakmem's, for this program, for glibc's
 * internal callers (strdup) and for GLib. */
static void
test_interposed (void)
{
  void *p = malloc (100);
  g_assert_nonnull (p);
  g_assert_cmpint (hak_owns (p), ==, 1);
  free (p);

  char *s = strdup ("hakmem");
  g_assert_nonnull (s);
  g_assert_cmpint (hak_owns (s), ==, 1);
  free (s);

  gchar *g = g_strdup_printf ("%s-%d", "glib", 42);
  g_assert_cmpint (hak_owns (g), ==, 1);
  g_free (g);

  void *a = aligned_alloc (4096, 10);
  g_assert_cmpint (hak_owns (a), ==, 1);
  free (a);
}

/* The hak_* names and the standard names are the same allocator: blocks move
 * freely between them. */
static void
test_names_agree (void)
{
  const size_t sizes[] = { 0, 10, 1000, 20000, 500000, 5 * HT_MiB };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      size_t n = sizes[i];
      unsigned char *a = malloc (n);
      unsigned char *b = hak_malloc (n);
      g_assert_nonnull (a);
      g_assert_nonnull (b);
      g_assert_cmpint (hak_owns (a), ==, 1);
      g_assert_cmpint (hak_owns (b), ==, 1);
      g_assert_cmpuint (malloc_usable_size (a), ==, hak_malloc_usable_size (a));
      g_assert_cmpuint (malloc_usable_size (b), ==, hak_malloc_usable_size (b));
      /* not equal to each other in general: a class with no free block
       * may serve a request from a larger class's (a stand-in), and a
       * takes a block before b does */
      g_assert_cmpuint (malloc_usable_size (a), >=, n);
      g_assert_cmpuint (malloc_usable_size (b), >=, n);
      ht_fill (a, n, 1);
      ht_fill (b, n, 2);
      a = hak_realloc (a, n + 100);
      b = realloc (b, n + 100);
      g_assert_nonnull (a);
      g_assert_nonnull (b);
      ht_assert_pattern (a, n, 1);
      ht_assert_pattern (b, n, 2);
      hak_free (a);
      free (b);

      unsigned char *c = hak_calloc (1, n);
      g_assert_true (ht_all_bytes (c, n, 0));
      free (c);

      void *d = NULL;
      g_assert_cmpint (hak_posix_memalign (&d, 256, n), ==, 0);
      ht_assert_aligned (d, 256);
      g_assert_cmpuint (malloc_usable_size (d), >=, n);
      free_sized (d, n);

      void *e = hak_aligned_alloc (4096, n);
      ht_assert_aligned (e, 4096);
      free_aligned_sized (e, 4096, n);

      void *f = hak_memalign (128, n);
      ht_assert_aligned (f, 128);
      hak_free_sized (f, n);

      void *g = memalign (128, n);
      ht_assert_aligned (g, 128);
      hak_free_aligned_sized (g, 128, n);

      void *h = hak_valloc (n);
      ht_assert_aligned (h, 4096);
      free (h);
      void *k = hak_pvalloc (n);
      ht_assert_aligned (k, 4096);
      free (k);

      void *m = hak_reallocarray (NULL, n + 1, 2);
      g_assert_nonnull (m);
      m = reallocarray (m, n + 1, 3);
      g_assert_nonnull (m);
      hak_free (m);
    }

  errno = 0;
  g_assert_null (hak_malloc (ht_opaque (SIZE_MAX)));
  g_assert_cmpint (errno, ==, ENOMEM);
  errno = 0;
  g_assert_null (hak_calloc (ht_opaque (SIZE_MAX), 2));
  g_assert_cmpint (errno, ==, ENOMEM);
  void *p = NULL;
  g_assert_cmpint (hak_posix_memalign (&p, 24, 10), ==, EINVAL);
}
#endif

/* hak_print_config / hak_print_stats are callable at any time. */
static void
test_print_functions (void)
{
  if (g_test_subprocess ())
    {
      hak_print_config ();
      hak_print_stats ();
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*hakmem: *front*");
  g_test_trap_assert_stderr ("*hakmem: *safety*");
}

/* The hardened box's canary runs from the end of each request, whatever
 * its size: a block filled to the last byte asked frees quietly at every
 * size (a canary laid out off by a byte would report the program's own
 * bytes), and one more byte, or sixteen, past the request is reported at
 * free for every offset of the request's end within a word, in small and
 * in mid classes. Each overflow runs in a subprocess, as the report
 * aborts it. */
static void
test_hardened_canary_every_offset (void)
{
  if (!ht_safety_hardened ())
    {
      g_test_skip ("the canary is the hardened box's");
      return;
    }
  if (g_test_subprocess ())
    {
      size_t n = 0, over = 0;
      g_assert_cmpint (sscanf (g_getenv ("HT_CANARY_CASE"), "%zu %zu", &n, &over), ==, 2);
      unsigned char *p = T (malloc) (n);
      g_assert_nonnull (p);
      memset (p, 0x11, n);
      /* the bug under test: each byte past the request changed (a fixed
       * value would equal the random canary's byte one time in 256) */
      for (size_t i = n; i < n + over; i++)
        ((volatile unsigned char *) p)[i] ^= 0xa5;
      T (free) (p);
      return;
    }
  for (size_t n = 1; n <= 2200; n++)
    {
      unsigned char *p = T (malloc) (n);
      g_assert_nonnull (p);
      memset (p, 0x22, n);
      T (free) (p);
    }
  static const size_t firsts[] = { 1, 100, 1000, 3000 };
  for (size_t f = 0; f < G_N_ELEMENTS (firsts); f++)
    for (size_t n = firsts[f]; n < firsts[f] + 8; n++)
      for (size_t over = 1; over <= 16; over += 15)
        {
          char arg[64];
          g_snprintf (arg, sizeof arg, "%zu %zu", n, over);
          g_setenv ("HT_CANARY_CASE", arg, TRUE);
          g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
          g_test_trap_assert_failed ();
          g_test_trap_assert_stderr ("*heap overflow*");
        }
  g_unsetenv ("HT_CANARY_CASE");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/api/malloc-zero", test_malloc_zero);
  g_test_add_func ("/api/hardened-canary-every-offset", test_hardened_canary_every_offset);
  g_test_add_func ("/api/malloc-small", test_malloc_small);
  g_test_add_func ("/api/malloc-huge-enomem", test_malloc_huge);
  g_test_add_func ("/api/malloc-huge-keeps-caches", test_malloc_huge_keeps_caches);
  g_test_add_func ("/api/malloc-beyond-memory-enomem", test_malloc_beyond_memory);
  g_test_add_func ("/api/free-null", test_free_null);
  g_test_add_func ("/api/free-preserves-errno", test_free_preserves_errno);
  g_test_add_func ("/api/calloc-zeroes", test_calloc_zeroes);
  g_test_add_func ("/api/calloc-dirty-reuse", test_calloc_dirty_reuse);
  g_test_add_func ("/api/calloc-overflow", test_calloc_overflow);
  g_test_add_func ("/api/realloc-null", test_realloc_null);
  g_test_add_func ("/api/realloc-zero-frees", test_realloc_zero);
  g_test_add_func ("/api/realloc-huge-enomem", test_realloc_huge_fails);
  g_test_add_func ("/api/reallocarray", test_reallocarray);
  g_test_add_func ("/api/posix-memalign-einval", test_posix_memalign_einval);
  g_test_add_func ("/api/aligned-alloc-einval", test_aligned_alloc_einval);
  g_test_add_func ("/api/memalign-round-up", test_memalign_round_up);
  g_test_add_func ("/api/valloc-pvalloc", test_valloc_pvalloc);
  g_test_add_func ("/api/usable-size", test_usable_size);
  g_test_add_func ("/api/free-sized", test_free_sized);
  g_test_add_func ("/api/mixed-live", test_mixed_live);
  g_test_add_func ("/api/free-mark-lookalike", test_free_mark_lookalike);
#if HT_INTERPOSE
  g_test_add_func ("/api/interposed", test_interposed);
  g_test_add_func ("/api/names-agree", test_names_agree);
#endif
  g_test_add_func ("/api/print-functions", test_print_functions);

  return g_test_run ();
}
