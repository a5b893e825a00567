/* foreign: pointers hakmem did not hand out. glibc's blocks given to
 * free/realloc/malloc_usable_size go back to glibc; hak_owns() says 0 for
 * anything but a live hakmem block start and never faults. */
#include "hakmem-test.h"

#include <sys/mman.h>

static void
test_libc_free (void)
{
  const size_t sizes[] = { 1, 16, 100, 1000, 5000, 100000, 300000, 4 * HT_MiB };

  for (int round = 0; round < 50; round++)
    for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
      {
        unsigned char *p = __libc_malloc (sizes[i]);
        g_assert_nonnull (p);
        g_assert_cmpint (hak_owns (p), ==, 0);
        memset (p, 0x77, sizes[i]);
        T (free) (p);

        p = __libc_calloc (1, sizes[i]);
        g_assert_nonnull (p);
        g_assert_cmpint (hak_owns (p), ==, 0);
        T (free) (p);

        p = __libc_memalign (4096, sizes[i]);
        g_assert_nonnull (p);
        g_assert_cmpint (hak_owns (p), ==, 0);
        T (free) (p);
      }
}

/* Interleaved with hakmem blocks, many live at once. */
static void
test_mixed_ownership (void)
{
  enum { N = 2000 };
  void *p[N];
  size_t n[N];
  uint64_t rng = 11;

  for (int round = 0; round < 3; round++)
    {
      for (int i = 0; i < N; i++)
        {
          n[i] = 1 + ht_rand (&rng) % 3000;
          p[i] = (i % 2) ? __libc_malloc (n[i]) : T (malloc) (n[i]);
          g_assert_nonnull (p[i]);
          g_assert_cmpint (hak_owns (p[i]), ==, i % 2 ? 0 : 1);
          ht_fill (p[i], n[i], (uint64_t) i);
        }
      for (int i = 0; i < N; i++)
        {
          ht_assert_pattern (p[i], n[i], (uint64_t) i);
          T (free) (p[i]);
        }
    }
}

static void
test_libc_usable_size (void)
{
  const size_t sizes[] = { 1, 24, 100, 1000, 5000, 200000, 3 * HT_MiB };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      void *p = __libc_malloc (sizes[i]);
      g_assert_nonnull (p);
      size_t us = T (malloc_usable_size) (p);
      if (us < sizes[i])
        g_error ("malloc_usable_size(__libc_malloc(%zu)) = %zu", sizes[i], us);
      /* glibc's answer, not a hakmem class size: within a few words of the
       * request for glibc chunks. */
      g_assert_cmpuint (us, <=, sizes[i] + 2 * HT_MiB);
      memset (p, 1, us);
      T (free) (p);
    }
}

static void
test_libc_realloc (void)
{
  const size_t steps[] = { 10, 100, 5000, 300000, 5 * HT_MiB, 2000, 50 };

  for (size_t start = 0; start < 3; start++)
    {
      size_t cur = steps[start];
      uint64_t seed = start + 1;
      unsigned char *p = __libc_malloc (cur);
      g_assert_nonnull (p);
      ht_fill (p, cur, seed);
      for (size_t i = start + 1; i < G_N_ELEMENTS (steps); i++)
        {
          unsigned char *q = T (realloc) (p, steps[i]);
          if (!q)
            g_error ("realloc(foreign %zu -> %zu) returned NULL", cur, steps[i]);
          size_t keep = cur < steps[i] ? cur : steps[i];
          size_t bad = ht_check (q, keep, seed);
          if (bad != SIZE_MAX)
            g_error ("realloc(foreign %zu -> %zu) lost content at %zu", cur,
                     steps[i], bad);
          g_assert_cmpuint (T (malloc_usable_size) (q), >=, steps[i]);
          p = q;
          cur = steps[i];
          seed++;
          ht_fill (p, cur, seed);
        }
      T (free) (p);
    }

  /* realloc(foreign, 0) frees it (glibc: returns NULL). */
  void *p = __libc_malloc (100);
  g_assert_nonnull (p);
  g_assert_null (T (realloc) (p, ht_opaque (0)));

  /* reallocarray works on foreign blocks too. */
  unsigned char *a = __libc_malloc (40);
  g_assert_nonnull (a);
  ht_fill (a, 40, 5);
  a = T (reallocarray) (a, 100, 8);
  g_assert_nonnull (a);
  ht_assert_pattern (a, 40, 5);
  T (free) (a);
}

static void
test_libc_free_sized (void)
{
  for (size_t n = 1; n < 1000000; n *= 7)
    {
      void *p = __libc_malloc (n);
      g_assert_nonnull (p);
      T (free_sized) (p, n);
      p = __libc_memalign (256, n);
      g_assert_nonnull (p);
      T (free_aligned_sized) (p, 256, n);
    }
}

static int static_object[64];

static void
test_owns_garbage (void)
{
  int stack_object[16] = { 0 };
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);

  g_assert_cmpint (hak_owns (NULL), ==, 0);
  g_assert_cmpint (hak_owns (stack_object), ==, 0);
  g_assert_cmpint (hak_owns (&stack_object[4]), ==, 0);
  g_assert_cmpint (hak_owns (static_object), ==, 0);
  g_assert_cmpint (hak_owns (&static_object[32]), ==, 0);
  g_assert_cmpint (hak_owns ((void *) test_owns_garbage), ==, 0);
  g_assert_cmpint (hak_owns ("a string literal"), ==, 0);
  g_assert_cmpint (hak_owns ((void *) 0x1), ==, 0);
  g_assert_cmpint (hak_owns ((void *) 0x10), ==, 0);
  g_assert_cmpint (hak_owns ((void *) 0x1234), ==, 0);
  g_assert_cmpint (hak_owns ((void *) 0x1000), ==, 0);
  g_assert_cmpint (hak_owns ((void *) (uintptr_t) -4096), ==, 0);
  g_assert_cmpint (hak_owns ((void *) (uintptr_t) -16), ==, 0);
  g_assert_cmpint (hak_owns ((void *) UINTPTR_MAX), ==, 0);
  g_assert_cmpint (hak_owns ((void *) (uintptr_t) 0x00007ffffffff000ull), ==, 0);
  g_assert_cmpint (hak_owns ((void *) (uintptr_t) 0x0000800000000000ull), ==, 0);
  g_assert_cmpint (hak_owns ((void *) (uintptr_t) 0xdeadbeefdeadbee0ull), ==, 0);
  g_assert_cmpint (hak_owns ((void *) (uintptr_t) 0x7f0000000000ull), ==, 0);

  /* Unmapped and inaccessible memory, 2 MiB aligned to look like a span. */
  size_t len = 8 * HT_MiB;
  unsigned char *m = mmap (NULL, len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  g_assert_true (m != MAP_FAILED);
  unsigned char *al = (unsigned char *) (((uintptr_t) m + 2 * HT_MiB - 1)
                                         & ~(uintptr_t) (2 * HT_MiB - 1));
  g_assert_cmpint (hak_owns (al), ==, 0);
  g_assert_cmpint (hak_owns (al + 16), ==, 0);
  g_assert_cmpint (hak_owns (al + page), ==, 0);
  g_assert_cmpint (mprotect (al, 2 * HT_MiB, PROT_NONE), ==, 0);
  g_assert_cmpint (hak_owns (al), ==, 0);
  g_assert_cmpint (hak_owns (al + 64), ==, 0);
  g_assert_cmpint (hak_owns (al + page), ==, 0);
  g_assert_cmpint (munmap (m, len), ==, 0);
  g_assert_cmpint (hak_owns (al), ==, 0);
  g_assert_cmpint (hak_owns (al + 16), ==, 0);
  g_assert_cmpint (hak_owns (al + page + 48), ==, 0);

  /* Random addresses all over the user address space. */
  uint64_t rng = 1;
  for (int i = 0; i < 100000; i++)
    {
      uintptr_t a = (uintptr_t) (ht_rand (&rng) & 0x00007ffffffffff0ull);
      int r = hak_owns ((void *) a);
      g_assert_true (r == 0 || r == 1);
    }
}

static void
test_owns_hakmem (void)
{
  const size_t sizes[] = { 0, 1, 16, 100, 1024, 1025, 5000, 65536,
                           256 * HT_KiB, 256 * HT_KiB + 1, 3 * HT_MiB };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      void *p = T (malloc) (sizes[i]);
      g_assert_nonnull (p);
      if (hak_owns (p) != 1)
        g_error ("hak_owns(malloc(%zu)) != 1", sizes[i]);
      T (free) (p);

      p = T (calloc) (1, sizes[i]);
      g_assert_cmpint (hak_owns (p), ==, 1);
      p = T (realloc) (p, sizes[i] * 2 + 1);
      g_assert_cmpint (hak_owns (p), ==, 1);
      T (free) (p);

      p = T (aligned_alloc) (65536, sizes[i]);
      g_assert_cmpint (hak_owns (p), ==, 1);
      T (free) (p);

      g_assert_cmpint (T (posix_memalign) (&p, 2 * HT_MiB, sizes[i]), ==, 0);
      g_assert_cmpint (hak_owns (p), ==, 1);
      T (free) (p);
    }
}

/* Interior pointers are not block starts (whatever the safety box). */
static void
test_owns_interior (void)
{
  const size_t sizes[] = { 32, 100, 1000, 5000, 65536, 300000, 3 * HT_MiB };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      unsigned char *p = T (malloc) (sizes[i]);
      g_assert_nonnull (p);
      g_assert_cmpint (hak_owns (p), ==, 1);
      if (hak_owns (p + 1) || hak_owns (p + 8) || hak_owns (p + sizes[i] / 2 + 1)
          || (sizes[i] > 4096 && hak_owns (p + 4096)))
        g_error ("hak_owns() says 1 for an interior pointer of a %zu-byte block",
                 sizes[i]);
      T (free) (p);
    }
}

/* A freed large block is no longer a block start (small blocks may still
 * answer 1 while their run is in use: see hakmem.h). */
static void
check_owns_after_free (const size_t *sizes, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      unsigned char *p = T (malloc) (sizes[i]);
      g_assert_nonnull (p);
      g_assert_cmpint (hak_owns (p), ==, 1);
      uintptr_t addr = (uintptr_t) p;
      T (free) (p);
      if (hak_owns ((void *) addr) != 0)
        g_error ("hak_owns() = 1 after free of a %zu-byte block", sizes[i]);
    }
}

static void
test_owns_after_free_large (void)
{
  const size_t sizes[] = { 300000, 3 * HT_MiB, 100 * HT_MiB };
  check_owns_after_free (sizes, G_N_ELEMENTS (sizes));
}

/* Memory that was a SuperSlab, given back to the OS and mapped again by
 * the program, holds no blocks: a free of a pointer into it is reported
 * and ignored (HAKMEM_ON_ERROR=warn), never taken into a bin and handed
 * out. The free hit path reads the SuperSlab's tags from the tag window,
 * so they must go when the range goes (superslab.c, ss_unmap). */
enum { REMAP_SIZE = 64, REMAP_N = (6 * 1024 * 1024) / REMAP_SIZE };

static void
test_unmapped_superslab_not_blocks (void)
{
  if (!g_test_subprocess ())
    {
      g_setenv ("HAKMEM_ON_ERROR", "warn", TRUE);
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_unsetenv ("HAKMEM_ON_ERROR");
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr ("*hakmem: error: free(*");
      return;
    }
  void **blocks = g_new (void *, REMAP_N);
  for (size_t i = 0; i < REMAP_N; i++)
    g_assert_nonnull (blocks[i] = T (malloc) (REMAP_SIZE));
  for (size_t i = 0; i < REMAP_N; i++)
    T (free) (blocks[i]);
  T (malloc_trim) (0);

  /* take back, for the program, the first of the blocks' SuperSlabs that
   * hakmem gave back (the heap may keep its current one) */
  unsigned char *chunk = NULL, *q = NULL;
  for (size_t i = 0; i < REMAP_N && !chunk; i += 1024)
    {
      unsigned char *base = (unsigned char *) ((uintptr_t) blocks[i] & ~(uintptr_t) (2 * HT_MiB - 1));
      void *m = mmap (base, 2 * HT_MiB, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (m == base)
        chunk = base, q = blocks[i];
      else if (m != MAP_FAILED)
        munmap (m, 2 * HT_MiB);   /* an old kernel took it as a hint */
    }
  if (!chunk)
    g_error ("malloc_trim gave back none of the %zu KiB of free blocks' SuperSlabs",
             (size_t) REMAP_N * REMAP_SIZE / 1024);

  T (free) (q);   /* reported: not a block */
  for (size_t i = 0; i < REMAP_N; i++)
    {
      blocks[i] = T (malloc) (REMAP_SIZE);
      if ((unsigned char *) blocks[i] >= chunk && (unsigned char *) blocks[i] < chunk + 2 * HT_MiB)
        g_error ("malloc returned %p, inside memory the program mapped itself", blocks[i]);
    }
  for (size_t i = 0; i < REMAP_N; i++)
    T (free) (blocks[i]);
  munmap (chunk, 2 * HT_MiB);
  g_free (blocks);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/foreign/libc-free", test_libc_free);
  g_test_add_func ("/foreign/mixed-ownership", test_mixed_ownership);
  g_test_add_func ("/foreign/libc-usable-size", test_libc_usable_size);
  g_test_add_func ("/foreign/libc-realloc", test_libc_realloc);
  g_test_add_func ("/foreign/libc-free-sized", test_libc_free_sized);
  g_test_add_func ("/foreign/owns-garbage", test_owns_garbage);
  g_test_add_func ("/foreign/owns-hakmem", test_owns_hakmem);
  g_test_add_func ("/foreign/owns-interior", test_owns_interior);
  g_test_add_func ("/foreign/owns-after-free-large", test_owns_after_free_large);
  g_test_add_func ("/foreign/unmapped-superslab-not-blocks", test_unmapped_superslab_not_blocks);

  return g_test_run ();
}
