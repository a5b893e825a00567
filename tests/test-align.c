/* align: posix_memalign, aligned_alloc and memalign for every power-of-two
 * alignment from 8/16 bytes to 4 MiB over several sizes. */
#include "hakmem-test.h"

/* 300-1040: the tiny classes above 256 B, whose blocks are only 16-, 32-
 * or 64-byte aligned (docs/DESIGN.md, "Size classes") */
static const size_t sizes[] = { 0, 1, 100, 300, 500, 1000, 1040, 4096, 300000 };

enum which { POSIX_MEMALIGN, ALIGNED_ALLOC, MEMALIGN };
static const char *const names[] = { "posix_memalign", "aligned_alloc", "memalign" };

static void *
do_alloc (enum which w, size_t align, size_t size)
{
  void *p = NULL;
  switch (w)
    {
    case POSIX_MEMALIGN:
      {
        int rc = T (posix_memalign) (&p, align, size);
        if (rc != 0)
          g_error ("posix_memalign(%zu, %zu) failed: %d", align, size, rc);
        break;
      }
    case ALIGNED_ALLOC:
      p = T (aligned_alloc) (align, size);
      break;
    case MEMALIGN:
      p = T (memalign) (align, size);
      break;
    }
  if (!p)
    g_error ("%s(%zu, %zu) returned NULL", names[w], align, size);
  if ((uintptr_t) p % align != 0)
    g_error ("%s(%zu, %zu) = %p is misaligned", names[w], align, size, p);
  if (hak_owns (p) != 1)
    g_error ("hak_owns(%s(%zu, %zu)) != 1", names[w], align, size);
  size_t us = T (malloc_usable_size) (p);
  if (us < size)
    g_error ("%s(%zu, %zu): usable size %zu", names[w], align, size, us);
  return p;
}

typedef struct
{
  void *p;
  size_t usable;
  uint64_t seed;
} Live;

static void
run_alignments (enum which w, size_t min_align)
{
  size_t nalign = 0;
  for (size_t a = min_align; a <= 4 * HT_MiB; a *= 2)
    nalign++;
  size_t n = nalign * G_N_ELEMENTS (sizes);
  Live *live = g_new0 (Live, n);
  HtRange *r = g_new0 (HtRange, n);
  size_t k = 0;

  /* All alignments x sizes live at once, each filled over its usable size. */
  for (size_t a = min_align; a <= 4 * HT_MiB; a *= 2)
    for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
      {
        live[k].p = do_alloc (w, a, sizes[i]);
        live[k].usable = T (malloc_usable_size) (live[k].p);
        live[k].seed = k * 1000 + (uint64_t) w;
        ht_fill (live[k].p, live[k].usable, live[k].seed);
        r[k].start = (uintptr_t) live[k].p;
        r[k].end = r[k].start + (live[k].usable ? live[k].usable : 1);
        k++;
      }
  g_assert_cmpuint (k, ==, n);
  ht_assert_disjoint (r, n);
  for (size_t j = 0; j < n; j++)
    {
      ht_assert_pattern (live[j].p, live[j].usable, live[j].seed);
      T (free) (live[j].p);
    }

  /* Interleaved with plain mallocs, freed right away, repeated: the aligned
   * path must hand back reusable memory. */
  for (int round = 0; round < 3; round++)
    for (size_t a = min_align; a <= 4 * HT_MiB; a *= 2)
      for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
        {
          void *m = T (malloc) (sizes[i] + 1);
          void *p = do_alloc (w, a, sizes[i]);
          memset (p, 0x5a, sizes[i]);
          g_assert_nonnull (m);
          T (free) (m);
          g_assert_true (ht_all_bytes (p, sizes[i], 0x5a));
          T (free) (p);
        }

  g_free (live);
  g_free (r);
}

static void
test_posix_memalign (void)
{
  run_alignments (POSIX_MEMALIGN, sizeof (void *));
}

static void
test_aligned_alloc (void)
{
  run_alignments (ALIGNED_ALLOC, 16);
}

static void
test_memalign (void)
{
  run_alignments (MEMALIGN, 16);
}

/* Small alignments (<= 16) are always satisfied by the normal path. */
static void
test_small_alignments (void)
{
  for (size_t a = 1; a <= 16; a *= 2)
    for (size_t s = 0; s < 2000; s += 37)
      {
        void *p = T (aligned_alloc) (a, s);
        g_assert_nonnull (p);
        ht_assert_aligned (p, 16);
        memset (p, 1, s);
        T (free) (p);
        p = T (memalign) (a, s);
        g_assert_nonnull (p);
        ht_assert_aligned (p, 16);
        T (free) (p);
      }
}

/* Aligned blocks are ordinary blocks: realloc keeps content, usable size and
 * free_aligned_sized work. */
static void
test_aligned_then_realloc (void)
{
  for (size_t a = 32; a <= 4 * HT_MiB; a *= 4)
    for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
      {
        size_t s = sizes[i];
        unsigned char *p = do_alloc (ALIGNED_ALLOC, a, s);
        ht_fill (p, s, a + s);
        p = T (realloc) (p, s * 3 + 10);
        g_assert_nonnull (p);
        ht_assert_pattern (p, s, a + s);
        ht_assert_aligned (p, 16);
        p = T (realloc) (p, s / 2 + 1);
        g_assert_nonnull (p);
        ht_assert_pattern (p, s / 2 + (s ? 1 : 0), a + s);
        T (free) (p);

        void *q = do_alloc (ALIGNED_ALLOC, a, s);
        T (free_aligned_sized) (q, a, s);
      }
}

/* Many small aligned blocks: the alignment must not be reached by wasting a
 * whole alignment-sized chunk per block in a way that exhausts memory, and
 * every block must stay distinct. */
static void
test_many_aligned (void)
{
  enum { N = 2000 };
  static const size_t aligns[] = { 32, 64, 128, 256, 512, 1024, 4096 };
  void **p = g_new0 (void *, N);
  HtRange *r = g_new0 (HtRange, N);

  for (size_t ai = 0; ai < G_N_ELEMENTS (aligns); ai++)
    {
      for (int i = 0; i < N; i++)
        {
          size_t s = (size_t) (i % 200) + 1;
          p[i] = do_alloc (ALIGNED_ALLOC, aligns[ai], s);
          ht_fill (p[i], s, (uint64_t) i);
          r[i].start = (uintptr_t) p[i];
          r[i].end = r[i].start + s;
        }
      ht_assert_disjoint (r, N);
      for (int i = 0; i < N; i++)
        {
          ht_assert_pattern (p[i], (size_t) (i % 200) + 1, (uint64_t) i);
          T (free) (p[i]);
        }
    }
  g_free (p);
  g_free (r);
}

/* An aligned request between 256 B and 1 KiB gets a block no larger than
 * the first quarter (320, 384, 448, 512, 640, 768, 896, 1024) that holds it
 * and is a multiple of the alignment: a naturally aligned block, not a mid
 * one (aligned_alloc(64, 512) took 1,152 bytes, memalign(512, 300) 1,536,
 * when only malloc's classes were looked at). Every block stays live, in a
 * fresh process, so that no larger free block can stand in. */
static void
test_aligned_tiny_blocks_fit (void)
{
  if (!ht_in_fresh_process ())
    return;
  static const size_t quarters[] = { 320, 384, 448, 512, 640, 768, 896, 1024 };
  static const size_t aligns[] = { 32, 64, 128, 256, 512, 1024 };
  static const size_t req[] = { 257, 300, 320, 384, 385, 449, 500, 512, 513, 700, 800, 1000, 1024 };
  void *live[G_N_ELEMENTS (aligns) * G_N_ELEMENTS (req)];
  size_t n = 0;
  for (size_t a = 0; a < G_N_ELEMENTS (aligns); a++)
    for (size_t r = 0; r < G_N_ELEMENTS (req); r++)
      {
        size_t fit = 0;
        for (size_t q = 0; q < G_N_ELEMENTS (quarters) && !fit; q++)
          if (quarters[q] >= req[r] && quarters[q] % aligns[a] == 0)
            fit = quarters[q];
        void *p = do_alloc (POSIX_MEMALIGN, aligns[a], req[r]);
        size_t usable = T (malloc_usable_size) (p);
        if (usable > fit)
          g_error ("posix_memalign(%zu, %zu) got a %zu-byte block; %zu would do",
                   aligns[a], req[r], usable, fit);
        live[n++] = p;
      }
  for (size_t i = 0; i < n; i++)
    T (free) (live[i]);
}

/* Every size up to 8 KiB, and mid sizes every 128 bytes to 256 KiB, at
 * every alignment a class can serve (32 B to 64 KiB): the block is
 * aligned, holds the request, and is not grossly larger than the request
 * rounded up to the alignment (the class comes from tables filled at init,
 * by size in 16-byte steps and then by class; an entry off by a step
 * hands out a block too small, a wrong row one far too large). A free
 * block of a class up to twice the size may stand in (size_class.h), so
 * the bound is loose. */
static void
test_every_size_every_alignment (void)
{
  for (size_t align = 32; align <= 64 * HT_KiB; align *= 2)
    for (size_t size = 1; size <= 256 * HT_KiB; size += size < 8 * HT_KiB ? 1 : 128)
      {
        void *p = T (aligned_alloc) (align, size);
        if (!p || (uintptr_t) p % align != 0)
          g_error ("aligned_alloc(%zu, %zu) = %p", align, size, p);
        size_t us = T (malloc_usable_size) (p);
        size_t rounded = (size + align - 1) / align * align;
        if (us < size || us > 4 * rounded)
          g_error ("aligned_alloc(%zu, %zu): usable size %zu", align, size, us);
        T (free) (p);
      }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/align/posix_memalign", test_posix_memalign);
  g_test_add_func ("/align/aligned_alloc", test_aligned_alloc);
  g_test_add_func ("/align/memalign", test_memalign);
  g_test_add_func ("/align/small-alignments", test_small_alignments);
  g_test_add_func ("/align/realloc-aligned", test_aligned_then_realloc);
  g_test_add_func ("/align/many-aligned", test_many_aligned);
  g_test_add_func ("/align/aligned-tiny-blocks-fit", test_aligned_tiny_blocks_fit);
  g_test_add_func ("/align/every-size-every-alignment", test_every_size_every_alignment);

  return g_test_run ();
}
