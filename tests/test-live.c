/* live: calls that take a block must find a live one. A free of a block
 * start its run never carved is reported and never handed out twice;
 * free_sized and free_aligned_sized report a size or alignment the block
 * cannot have been asked with, and take every one it can; and
 * malloc_usable_size of a freed block is 0, with no report, as glibc's. */
#include "hakmem-test.h"

/* Runs the calling test again in a child with HAKMEM_ON_ERROR=mode;
 * returns 1 in the child. */
static int
in_child (const char *mode)
{
  if (g_test_subprocess ())
    return 1;
  g_setenv ("HAKMEM_ON_ERROR", mode, TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_ON_ERROR");
  return 0;
}

/* n blocks of size: none twice */
static void
assert_no_duplicates (size_t size, size_t n)
{
  void **b = g_new (void *, n);
  GHashTable *seen = g_hash_table_new (NULL, NULL);
  for (size_t i = 0; i < n; i++)
    {
      g_assert_nonnull (b[i] = T (malloc) (size));
      if (g_hash_table_contains (seen, b[i]))
        g_error ("malloc(%zu) returned %p twice", size, b[i]);
      g_hash_table_add (seen, b[i]);
    }
  for (size_t i = 0; i < n; i++)
    T (free) (b[i]);
  g_hash_table_destroy (seen);
  g_free (b);
}

/* In a fresh process, a block `ahead` blocks past the first of a class is
 * a block start of its run that was not carved yet. */
static void
check_uncarved (size_t size, size_t ahead)
{
  unsigned char *p = T (malloc) (size);
  g_assert_nonnull (p);
  T (free) (p + ahead * size);   /* reported, ignored */
  assert_no_duplicates (size, 600);
  T (free) (p);
}

static void
test_uncarved_tiny (void)
{
  if (in_child ("warn"))
    {
      check_uncarved (48, 120);
      return;
    }
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*free(*): not a live block*");
}

static void
test_uncarved_mid (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  if (in_child ("warn"))
    {
      check_uncarved (24 * HT_KiB, 1);
      check_uncarved (96 * HT_KiB, 1);
      return;
    }
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*free(*): not a live block*free(*): not a live block*");
}

/* Blocks carved, handed out and freed still work, and a double free of
 * one is still caught: the page tags follow the carving. */
static void
test_carved_blocks_work (void)
{
  static const size_t sizes[] = { 16, 48, 100, 700, 1040, 3000, 24 * HT_KiB, 96 * HT_KiB };
  for (size_t s = 0; s < G_N_ELEMENTS (sizes); s++)
    {
      enum { N = 3000 };
      unsigned char **b = g_new (unsigned char *, N);
      for (int round = 0; round < 2; round++)
        {
          for (size_t i = 0; i < N; i++)
            {
              g_assert_nonnull (b[i] = T (malloc) (sizes[s]));
              g_assert_cmpint (hak_owns (b[i]), ==, 1);
              ht_fill (b[i], sizes[s] < 256 ? sizes[s] : 256, i);
            }
          for (size_t i = 0; i < N; i++)
            {
              ht_assert_pattern (b[i], sizes[s] < 256 ? sizes[s] : 256, i);
              T (free) (b[i]);
            }
        }
      g_free (b);
    }
}

/* free_sized and free_aligned_sized with the size (and alignment) asked:
 * never reported, whatever path the block took (malloc, calloc, realloc
 * in place or moved, aligned_alloc). The child aborts on any report. */
static void
test_sized_right (void)
{
  if (!in_child ("abort"))
    {
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr_unmatched ("*hakmem: error*");
      return;
    }
  uint64_t rng = 5;
  for (int i = 0; i < 20000; i++)
    {
      size_t n = ht_rand (&rng) % 4 ? ht_rand (&rng) % 2000 : ht_rand (&rng) % (600 * HT_KiB);
      void *p = (i % 3) ? T (malloc) (n) : T (calloc) (1, n);
      g_assert_true (p != NULL || n == 0);
      if (i % 5 == 0)
        {
          size_t m = n / 4 + ht_rand (&rng) % (n + 1);   /* in place or moved */
          void *q = T (realloc) (p, m ? m : 1);
          g_assert_nonnull (q);
          p = q, n = m ? m : 1;
        }
      T (free_sized) (p, n);
    }
  for (size_t align = 16; align <= 2 * HT_MiB; align *= 2)
    for (size_t n = align; n <= 300 * HT_KiB; n = n * 3 + align)
      {
        size_t size = (n / align) * align;
        void *p = T (aligned_alloc) (align, size);
        g_assert_nonnull (p);
        T (free_aligned_sized) (p, align, size);
      }
}

/* A size or alignment the block cannot have: reported, no effect. */
static void
test_sized_wrong (void)
{
  if (in_child ("warn"))
    {
      unsigned char *p = T (malloc) (8 * HT_KiB);
      g_assert_nonnull (p);
      ht_fill (p, 8 * HT_KiB, 3);
      T (free_sized) (p, 9 * HT_KiB);
      T (free_aligned_sized) (p, 16, 16 * HT_KiB);
      ht_assert_pattern (p, 8 * HT_KiB, 3);
      g_assert_cmpint (hak_owns (p), ==, 1);
      g_assert_cmpuint (T (malloc_usable_size) (p), >=, 8 * HT_KiB);
      T (free_sized) (p, 8 * HT_KiB);
      return;
    }
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*free_sized(*): size 9216 does not match the block (usable *"
                             "free_aligned_sized(*): size 16384 does not match*");
}

/* malloc_usable_size of a freed block: 0, no report (a neighbour keeps
 * its run in use). */
static void
test_usable_freed (void)
{
  if (!in_child ("abort"))
    {
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr_unmatched ("*hakmem: error*");
      return;
    }
  static const size_t sizes[] = { 32, 700, 8 * HT_KiB, 96 * HT_KiB };
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      void *keep = T (malloc) (sizes[i]);
      void *p = T (malloc) (sizes[i]);
      g_assert_cmpuint (T (malloc_usable_size) (p), >=, sizes[i]);
      T (free) (p);
      if (T (malloc_usable_size) (p) != 0)
        g_error ("malloc_usable_size of a freed %zu-byte block is not 0", sizes[i]);
      T (free) (keep);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/live/uncarved-tiny", test_uncarved_tiny);
  g_test_add_func ("/live/uncarved-mid", test_uncarved_mid);
  g_test_add_func ("/live/carved-blocks-work", test_carved_blocks_work);
  g_test_add_func ("/live/sized-right", test_sized_right);
  g_test_add_func ("/live/sized-wrong", test_sized_wrong);
  g_test_add_func ("/live/usable-freed", test_usable_freed);
  return g_test_run ();
}
