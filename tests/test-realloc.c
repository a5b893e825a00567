/* realloc: content preserved across every size range in both directions,
 * in-place behaviour where it is cheap, long growth chains. */
#include "hakmem-test.h"

/* Resizes p from old to new, checking the common prefix kept its pattern and
 * refilling the whole new block with the next pattern. */
static unsigned char *
resize (unsigned char *p, size_t old, size_t new_size, uint64_t *seed)
{
  unsigned char *q = T (realloc) (p, new_size);
  if (!q)
    g_error ("realloc(%zu -> %zu) returned NULL", old, new_size);
  ht_assert_aligned (q, 16);
  size_t keep = old < new_size ? old : new_size;
  size_t bad = ht_check (q, keep, *seed);
  if (bad != SIZE_MAX)
    g_error ("realloc(%zu -> %zu) lost content at offset %zu", old, new_size, bad);
  size_t us = T (malloc_usable_size) (q);
  if (us < new_size)
    g_error ("realloc(%zu -> %zu): usable size %zu", old, new_size, us);
  g_assert_cmpint (hak_owns (q), ==, 1);
  *seed += 1;
  ht_fill (q, new_size, *seed);
  return q;
}

static void
walk (const size_t *steps, size_t n)
{
  uint64_t seed = steps[0];
  unsigned char *p = T (malloc) (steps[0]);
  g_assert_nonnull (p);
  ht_fill (p, steps[0], seed);
  for (size_t i = 1; i < n; i++)
    p = resize (p, steps[i - 1], steps[i], &seed);
  ht_assert_pattern (p, steps[n - 1], seed);
  T (free) (p);
}

/* tiny -> mid -> large -> huge and back down. */
static void
test_across_ranges (void)
{
  static const size_t up_down[] = {
    1, 16, 17, 100, 1000, 1024, 1025, 4000, 65536, 200000, 256 * 1024,
    256 * 1024 + 1, 300000, 1500000, 5 * 1024 * 1024, 70 * 1024 * 1024,
    5 * 1024 * 1024, 300000, 256 * 1024 + 1, 256 * 1024, 100000, 5000, 1025,
    1024, 100, 17, 16, 1,
  };
  /* Jumps that skip whole ranges. */
  static const size_t jumps[] = {
    8, 70 * 1024 * 1024, 8, 300000, 24, 1024 * 1024, 2000, 64 * 1024 * 1024,
    700, 3 * 1024 * 1024, 150000, 3, 260 * 1024,
  };

  walk (up_down, G_N_ELEMENTS (up_down));
  walk (jumps, G_N_ELEMENTS (jumps));
  /* Again, now that caches hold freed blocks of all these sizes. */
  walk (up_down, G_N_ELEMENTS (up_down));
  walk (jumps, G_N_ELEMENTS (jumps));
}

/* Other blocks live around the resized one must not be disturbed. */
static void
test_neighbours_untouched (void)
{
  enum { N = 64 };
  unsigned char *nb[N];
  size_t nsz[N];
  uint64_t seed = 9;
  unsigned char *p = T (malloc) (10);
  size_t cur = 10;

  g_assert_nonnull (p);
  ht_fill (p, cur, seed);
  for (int i = 0; i < N; i++)
    {
      nsz[i] = (size_t) 1 << (i % 22);
      nb[i] = T (malloc) (nsz[i]);
      g_assert_nonnull (nb[i]);
      ht_fill (nb[i], nsz[i], 1000 + (uint64_t) i);
      size_t next = (size_t) 1 << ((i * 7) % 24);
      p = resize (p, cur, next, &seed);
      cur = next;
    }
  for (int i = 0; i < N; i++)
    {
      ht_assert_pattern (nb[i], nsz[i], 1000 + (uint64_t) i);
      T (free) (nb[i]);
    }
  T (free) (p);
}

/* Shrinking a block, or growing it within its usable size, keeps it where it
 * is. */
static void
test_in_place (void)
{
  static const size_t sizes[] = { 64, 100, 1000, 5000, 100000, 200000 };

  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      size_t s = sizes[i];
      unsigned char *p = T (malloc) (s);
      g_assert_nonnull (p);
      size_t us = T (malloc_usable_size) (p);
      uintptr_t orig = (uintptr_t) p;
      ht_fill (p, s, s);
      /* Same class: a few bytes less. */
      unsigned char *q = T (realloc) (p, s - 1);
      if ((uintptr_t) q != orig)
        g_error ("realloc(%zu -> %zu) moved the block", s, s - 1);
      ht_assert_pattern (q, s - 1, s);
      /* Grow back up to the usable size. */
      q = T (realloc) (q, us);
      if ((uintptr_t) q != orig)
        g_error ("realloc(%zu -> usable size %zu) moved the block", s - 1, us);
      ht_assert_pattern (q, s - 1, s);
      T (free) (q);
    }

  /* Large blocks (mremap-backed) shrink in place, to any large size. */
  static const size_t large[][2] = {
    { 64 * HT_MiB, 8 * HT_MiB },
    { 8 * HT_MiB, 4 * HT_MiB + 3 },
    { 4 * HT_MiB, 4 * HT_MiB - 4096 },
    { 3 * HT_MiB, 300000 },
  };
  for (size_t i = 0; i < G_N_ELEMENTS (large); i++)
    {
      unsigned char *p = T (malloc) (large[i][0]);
      g_assert_nonnull (p);
      uintptr_t orig = (uintptr_t) p;
      ht_fill (p, large[i][0], i);
      unsigned char *q = T (realloc) (p, large[i][1]);
      if ((uintptr_t) q != orig)
        g_error ("realloc(%zu -> %zu) of a large block moved it", large[i][0],
                 large[i][1]);
      ht_assert_pattern (q, large[i][1], i);
      g_assert_cmpuint (T (malloc_usable_size) (q), >=, large[i][1]);
      T (free) (q);
    }
}

/* A buffer grown by 1.5x from 1 byte to 64 MiB, the usual dynamic-array
 * pattern, keeps every byte at every step. */
static void
test_growth_chain (void)
{
  for (int round = 0; round < 2; round++)
    {
      uint64_t seed = 1000 + (uint64_t) round;
      size_t cur = 1;
      unsigned char *p = T (malloc) (cur);
      g_assert_nonnull (p);
      ht_fill (p, cur, seed);
      int steps = 0;
      while (cur < 64 * HT_MiB)
        {
          size_t next = cur + cur / 2 + 1;
          if (next > 64 * HT_MiB)
            next = 64 * HT_MiB;
          p = resize (p, cur, next, &seed);
          cur = next;
          steps++;
        }
      g_assert_cmpint (steps, >, 40);
      /* And back down by 1.5x. */
      while (cur > 1)
        {
          size_t next = cur * 2 / 3;
          p = resize (p, cur, next, &seed);
          cur = next;
        }
      T (free) (p);
    }
}

/* Growing by one byte at a time through the small sizes. */
static void
test_grow_by_one (void)
{
  uint64_t seed = 5;
  size_t cur = 1;
  unsigned char *p = T (malloc) (cur);
  g_assert_nonnull (p);
  ht_fill (p, cur, seed);
  for (size_t n = 2; n <= 5000; n++)
    {
      p = resize (p, cur, n, &seed);
      cur = n;
    }
  for (size_t n = 4999; n >= 1; n -= 7)
    {
      p = resize (p, cur, n, &seed);
      cur = n;
      if (n < 8)
        break;
    }
  T (free) (p);
}

/* A buffer grown a byte at a time (a string realloc'ed to its exact
 * length) moves a bounded number of times: a block that must grow is
 * given room to spare, so the moves follow the size geometrically instead
 * of every 16-byte class step (64 moves for the tiny range alone). */
static void
test_grow_amortized (void)
{
  size_t moves = 0;
  char *p = T (malloc) (1);
  g_assert_nonnull (p);
  p[0] = 'x';
  for (size_t n = 2; n <= 65536; n++)
    {
      char *q = T (realloc) (p, n);
      g_assert_nonnull (q);
      g_assert_cmpint (q[0], ==, 'x');
      moves += q != p;
      p = q;
    }
  T (free) (p);
  g_test_message ("%zu moves growing 1 -> 65536 bytes", moves);
  /* The hardened box grows a block in place only within its class (its
   * canary follows the request): one move per class crossed, still a
   * geometric number. */
  g_assert_cmpuint (moves, <=, ht_safety_hardened () ? 80 : 60);
}

/* A vector that doubles its capacity sizes its own steps: each realloc
 * gets a block of the size asked (powers of two are classes), not the
 * eighth of slack small steps get, which would only be copied along and
 * kept resident. A fresh process, so that no free block of a larger class
 * is there to stand in. */
static void
test_doubling_no_slack (void)
{
  if (!ht_in_fresh_process ())
    return;
  size_t cap = 1024;
  unsigned char *v = T (malloc) (cap);
  g_assert_nonnull (v);
  ht_fill (v, cap, 7);
  for (cap = 2048; cap <= 256 * HT_KiB; cap *= 2)
    {
      v = T (realloc) (v, cap);
      g_assert_nonnull (v);
      ht_assert_pattern (v, cap / 2, 7);
      size_t us = T (malloc_usable_size) (v);
      if (us != cap)
        g_error ("realloc to %zu (doubling): usable size %zu", cap, us);
      ht_fill (v, cap, 7);
    }
  T (free) (v);
}

/* A mid-size block that a realloc moved out of goes straight back to its
 * run, not to the thread's bin. A 128 KiB block has a run of its own, so
 * its slabs are free for any class at once, and the next run the thread
 * needs (here one of 64 KiB blocks) is placed there, on pages already
 * touched, rather than wait in the bin for the next malloc of 128 KiB
 * (docs/PERFORMANCE.md, "realloc"). */
static void
test_moved_block_frees_its_run (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (!ht_in_fresh_process ())
    return;
  unsigned char *a = T (malloc) (128 * HT_KiB), *b = T (malloc) (128 * HT_KiB);
  g_assert_nonnull (a);
  g_assert_nonnull (b);
  ht_fill (a, 128 * HT_KiB, 1);
  ht_fill (b, 128 * HT_KiB, 2);
  uintptr_t old = (uintptr_t) a;
  a = T (realloc) (a, 256 * HT_KiB);
  g_assert_nonnull (a);
  ht_assert_pattern (a, 128 * HT_KiB, 1);
  unsigned char *c = T (malloc) (64 * HT_KiB);
  g_assert_nonnull (c);
  ht_fill (c, 64 * HT_KiB, 3);
  if ((uintptr_t) c < old || (uintptr_t) c >= old + 128 * HT_KiB)
    g_error ("a 64 KiB block went to %p, not into the 128 KiB block moved out of at %p", (void *) c,
             (void *) old);
  ht_assert_pattern (a, 128 * HT_KiB, 1);
  ht_assert_pattern (b, 128 * HT_KiB, 2);
  T (free) (a);
  T (free) (b);
  T (free) (c);
}

/* Several growing buffers interleaved, as in a program building many
 * strings at once. */
static void
test_interleaved_buffers (void)
{
  enum { N = 16 };
  unsigned char *p[N];
  size_t cur[N];
  uint64_t seed[N];
  uint64_t rng = 3;

  for (int i = 0; i < N; i++)
    {
      cur[i] = 1;
      seed[i] = (uint64_t) i * 100000;
      p[i] = T (malloc) (1);
      g_assert_nonnull (p[i]);
      ht_fill (p[i], 1, seed[i]);
    }
  for (int step = 0; step < 3000; step++)
    {
      int i = (int) (ht_rand (&rng) % N);
      uint64_t x = ht_rand (&rng);
      size_t next;
      if (x % 8 == 0)
        next = cur[i] / 2 + 1;
      else if (x % 64 == 1)
        next = 1;
      else
        next = cur[i] + 1 + (size_t) (x >> 40) % (cur[i] / 4 + 64);
      if (next > 8 * HT_MiB)
        next = 1000;
      p[i] = resize (p[i], cur[i], next, &seed[i]);
      cur[i] = next;
    }
  for (int i = 0; i < N; i++)
    {
      ht_assert_pattern (p[i], cur[i], seed[i]);
      T (free) (p[i]);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/realloc/across-ranges", test_across_ranges);
  g_test_add_func ("/realloc/neighbours-untouched", test_neighbours_untouched);
  g_test_add_func ("/realloc/in-place", test_in_place);
  g_test_add_func ("/realloc/growth-chain-1.5x", test_growth_chain);
  g_test_add_func ("/realloc/grow-by-one", test_grow_by_one);
  g_test_add_func ("/realloc/grow-amortized", test_grow_amortized);
  g_test_add_func ("/realloc/interleaved-buffers", test_interleaved_buffers);
  g_test_add_func ("/realloc/doubling-no-slack", test_doubling_no_slack);
  g_test_add_func ("/realloc/moved-block-frees-its-run", test_moved_block_frees_its_run);

  return g_test_run ();
}
