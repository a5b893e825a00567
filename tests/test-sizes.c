/* sizes: every small size and every size-class boundary, many blocks live at
 * once, whole usable size written, no two blocks overlapping. */
#include "hakmem-test.h"

#include <pthread.h>

typedef struct
{
  void *p;
  size_t size;
  size_t usable;
  uint64_t seed;
} Block;

static void
alloc_block (Block *b, size_t size, uint64_t seed)
{
  b->p = T (malloc) (size);
  if (!b->p)
    g_error ("malloc(%zu) returned NULL", size);
  if ((uintptr_t) b->p & 15)
    g_error ("malloc(%zu) = %p is not 16-byte aligned", size, b->p);
  b->size = size;
  b->usable = T (malloc_usable_size) (b->p);
  if (b->usable < size)
    g_error ("malloc_usable_size(malloc(%zu)) = %zu", size, b->usable);
  if (hak_owns (b->p) != 1)
    g_error ("hak_owns(malloc(%zu)) != 1", size);
  b->seed = seed;
  ht_fill (b->p, b->usable, seed);
}

static void
check_block (const Block *b)
{
  size_t bad = ht_check (b->p, b->usable, b->seed);
  if (bad != SIZE_MAX)
    g_error ("block %p of size %zu (usable %zu) overwritten at offset %zu",
             b->p, b->size, b->usable, bad);
  if (T (malloc_usable_size) (b->p) != b->usable)
    g_error ("usable size of %p changed from %zu to %zu", b->p, b->usable,
             T (malloc_usable_size) (b->p));
}

static void
check_all (Block *blocks, size_t n)
{
  HtRange *r = g_new (HtRange, n);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    {
      if (!blocks[i].p)
        continue;
      check_block (&blocks[i]);
      r[k].start = (uintptr_t) blocks[i].p;
      r[k].end = r[k].start + blocks[i].usable;
      k++;
    }
  ht_assert_disjoint (r, k);
  g_free (r);
}

static void
shuffle (size_t *idx, size_t n, uint64_t seed)
{
  for (size_t i = 0; i < n; i++)
    idx[i] = i;
  for (size_t i = n; i > 1; i--)
    {
      size_t j = ht_rand (&seed) % i;
      size_t t = idx[i - 1];
      idx[i - 1] = idx[j];
      idx[j] = t;
    }
}

/* Every size 0..4096, all live at once; freed in random order, half of them
 * reallocated in between to exercise reuse while the others are live. */
static void
test_every_small_size (void)
{
  enum { N = 4097 };
  Block *b = g_new0 (Block, N);
  size_t *idx = g_new (size_t, N);

  for (int round = 0; round < 3; round++)
    {
      for (size_t s = 0; s < N; s++)
        alloc_block (&b[s], s, s * 7 + (size_t) round);
      check_all (b, N);

      shuffle (idx, N, (uint64_t) round + 1);
      for (size_t i = 0; i < N / 2; i++)
        {
          Block *x = &b[idx[i]];
          check_block (x);
          T (free) (x->p);
          x->p = NULL;
        }
      /* Reuse the freed space with other sizes while the rest stays live. */
      for (size_t i = 0; i < N / 2; i++)
        alloc_block (&b[idx[i]], (idx[i] * 13 + 5) % N, idx[i] + 100000);
      check_all (b, N);

      shuffle (idx, N, (uint64_t) round + 77);
      for (size_t i = 0; i < N; i++)
        {
          check_block (&b[idx[i]]);
          T (free) (b[idx[i]].p);
          b[idx[i]].p = NULL;
        }
    }
  g_free (b);
  g_free (idx);
}

/* The tiny classes between 256 B and 1 KiB that sit 16 or 32 bytes past
 * their quarter or eighth (base/size_class.h), the last of them the
 * tiny/mid edge. */
static const size_t shifted_classes[] = { 400, 528, 624, 784, 928, 1040 };

/* Size-class boundaries: 16-byte steps up to 128, then the quarters up to
 * 512 and the eighths up to 1 MiB (covering tiny, mid 256 KiB and the
 * first large sizes, and the shifted classes above), and from 4 KiB up
 * one a 32nd past each power of two, plus a few large sizes. */
static size_t
boundary_sizes (size_t *out)
{
  size_t n = 0;
  for (size_t i = 0; i < G_N_ELEMENTS (shifted_classes); i++)
    out[n++] = shifted_classes[i];
  for (size_t s = 16; s <= 128; s += 16)
    out[n++] = s;
  for (size_t p = 128; p < HT_MiB; p *= 2)
    {
      if (p >= 4096)
        out[n++] = p + p / 32;
      for (size_t k = 1; k <= 8; k++)
        if (p >= 512 || k % 2 == 0)
          out[n++] = p + k * p / 8;
    }
  out[n++] = 2 * HT_MiB;
  out[n++] = 4 * HT_MiB;
  return n;
}

static void
test_class_boundaries (void)
{
  size_t bounds[128];   /* 120 used */
  size_t nb = boundary_sizes (bounds);
  Block *b = g_new0 (Block, nb * 3 * 4);
  size_t n = 0;

  for (int copy = 0; copy < 4; copy++)
    for (size_t i = 0; i < nb; i++)
      for (int d = -1; d <= 1; d++)
        {
          size_t s = bounds[i] + (size_t) d;
          alloc_block (&b[n], s, n);
          n++;
        }
  check_all (b, n);

  /* Free every other block, allocate the same sizes again, check again. */
  for (size_t i = 0; i < n; i += 2)
    {
      check_block (&b[i]);
      T (free) (b[i].p);
      b[i].p = NULL;
    }
  for (size_t i = 0; i < n; i += 2)
    alloc_block (&b[i], bounds[(i / 3) % nb] + (i % 3) - 1, i + 5000);
  check_all (b, n);

  for (size_t i = 0; i < n; i++)
    {
      check_block (&b[i]);
      T (free) (b[i].p);
    }
  g_free (b);
}

/* Usable sizes follow the documented classes: at most 25% (plus a 16-byte
 * step) above the request up to 256 KiB, or twice that when a free block of
 * a larger class stood in (see test_larger_class_stands_in). A large block
 * lives in a 2 MiB-aligned span, possibly a cached one up to a quarter plus
 * one chunk larger than needed: its usable size stays below that. */
static void
test_usable_bound (void)
{
  for (size_t s = 1; s <= HT_MiB + 4096; s = s < 300 ? s + 1 : s + s / 37)
    {
      void *p = T (malloc) (s);
      g_assert_nonnull (p);
      size_t us = T (malloc_usable_size) (p);
      size_t span = ((s + 2 * HT_MiB - 1) & ~(2 * HT_MiB - 1)) + 2 * HT_MiB;
      size_t bound = s <= 256 * HT_KiB ? 2 * (s + s / 4 + 16) : span + span / 4 + 2 * HT_MiB;
      if (us < s || us > bound)
        g_error ("malloc_usable_size(malloc(%zu)) = %zu, expected in [%zu, %zu]",
                 s, us, s, bound);
      T (free) (p);
    }
}

/* Rounding near glibc's, whose usable size is the request rounded up to
 * 16, less 8, in a chunk 8 bytes larger (malloc(700): 712 usable, 720
 * taken). The sizes programs were seen to use most get at most 3% plus a
 * 16-byte step: 24-byte list nodes (a 32-byte block, as glibc's chunk),
 * 700-byte records, redis's 4,100-byte values (4 KiB and a header),
 * 33,000-byte buffers; a program made of such blocks then takes at most
 * about 1.03 times glibc's memory. Every other size from 257 B to 256 KiB
 * gets at most an eighth plus 16 B where the classes are the eighths (4
 * to 64 KiB) and a quarter plus 16 B where they are (about) the quarters
 * (256 B to 4 KiB, 64 to 256 KiB, kept so for the number of classes a
 * program's runs spread over); a power of two plus up to a 32nd of it
 * from 4 to 32 KiB, a 32nd. Class sizes, not one block's usable size: a
 * larger free block may stand in (ht_class_size). */
static void
test_usable_near_glibc (void)
{
  static const size_t common[] = { 24, 700, 4100, 33000 };
  for (size_t i = 0; i < G_N_ELEMENTS (common); i++)
    {
      size_t s = common[i], us = ht_class_size (s);
      g_test_message ("malloc(%zu): %zu usable", s, us);
      if (us > s + s * 3 / 100 + 16)
        g_error ("malloc(%zu) takes a %zu-byte class, more than 3%% + 16 B above", s, us);
    }
  for (size_t s = 257; s <= 256 * HT_KiB; s += s / 61 + 1)
    {
      size_t us = ht_class_size (s);
      gboolean quarters = s <= 4096 || s > 64 * HT_KiB;
      size_t bound = s + (quarters ? s / 4 : s / 8) + 16;
      if (us < s || us > bound)
        g_error ("malloc(%zu) takes a %zu-byte class, expected in [%zu, %zu]", s, us, s, bound);
    }
  for (size_t pow = 4 * HT_KiB; pow <= 32 * HT_KiB; pow *= 2)
    for (size_t h = 1; h <= pow / 32; h += pow / 64 - 1)
      {
        size_t us = ht_class_size (pow + h);
        if (us > pow + pow / 32)
          g_error ("malloc(%zu) takes a %zu-byte class, more than %zu", pow + h, us, pow + pow / 32);
      }
}

/* Blocks of a class that fits a 64 KiB slab badly are laid end to end
 * over their run (backend/superslab.h, hak_ss_per_slab): 33,000-byte
 * requests (33,792-byte blocks, one a slab otherwise, 48% of it unused),
 * and those of whole pages that do not divide a slab (24,576 B, two a slab
 * otherwise, a quarter unused; 12,288, 20,480 and 28,672 B).
 * The slabs their blocks cover then hold them with at most a few percent
 * to spare: address space, which `ulimit -v` counts. In a fresh process,
 * whose runs of the class are new. */
static void
test_badly_fitting_class_end_to_end (void)
{
  enum { N = 120 };
  if (!ht_in_fresh_process ())
    return;
  static const size_t sizes[] = { 33000, 24000, 12000, 20000, 28000 };
  void **b = g_new0 (void *, N);
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      GHashTable *slabs = g_hash_table_new (g_direct_hash, g_direct_equal);
      size_t us = ht_class_size (sizes[i]);
      for (size_t k = 0; k < N; k++)
        {
          b[k] = T (malloc) (sizes[i]);
          g_assert_nonnull (b[k]);
          memset (b[k], 0x3d, sizes[i]);
          for (uintptr_t a = (uintptr_t) b[k] >> 16; a <= ((uintptr_t) b[k] + us - 1) >> 16; a++)
            g_hash_table_add (slabs, GSIZE_TO_POINTER (a));
        }
      size_t covered = g_hash_table_size (slabs), need = (N * us + 65535) / 65536;
      /* the hardened box hands a run's blocks out in random order, from
       * more than one run at a time: a few slabs more are partly used */
      size_t most = need + need / 16 + (ht_safety_hardened () ? 4 : 2);
      g_test_message ("%d blocks of %zu B (%zu usable) cover %zu slabs; they fill %zu",
                      (int) N, sizes[i], us, covered, need);
      if (covered > most)
        g_error ("%d blocks of %zu B cover %zu slabs of 64 KiB, expected at most %zu",
                 (int) N, sizes[i], covered, most);
      for (size_t k = 0; k < N; k++)
        T (free) (b[k]);
      g_hash_table_destroy (slabs);
    }
  g_free (b);
}

/* A power-of-two payload plus a small header (a database page and its
 * descriptor) gets a block at most an eighth larger than the power of two
 * from 1 KiB up, not the next quarter, as sqlite's page cache asks (4 KiB
 * pages with a descriptor of a few hundred bytes; docs/PERFORMANCE.md,
 * "Size classes"). A free
 * block of a larger class may stand in for a few of them (the test
 * harness's own blocks: a fresh process keeps out those of the other
 * tests), so most, not all, must be of that class. */
static void
test_power_of_two_plus_header (void)
{
  enum { PER_SIZE = 32, IN_CLASS_MIN = 24 };
  if (!ht_in_fresh_process ())
    return;
  void **live = g_new0 (void *, PER_SIZE);
  for (size_t pow = HT_KiB; pow <= 128 * HT_KiB; pow *= 2)
    for (size_t h = 0; h < 3; h++)
      {
        const size_t header[3] = { 1, 16, pow / 8 };   /* the last: the largest that fits */
        size_t size = pow + header[h], in_class = 0;
        for (size_t i = 0; i < PER_SIZE; i++)
          {
            live[i] = T (malloc) (size);
            g_assert_nonnull (live[i]);
            size_t us = T (malloc_usable_size) (live[i]);
            g_assert_cmpuint (us, >=, size);
            in_class += us <= pow + pow / 8;
            memset (live[i], 0x5A, us);
          }
        if (in_class < IN_CLASS_MIN)
          g_error ("malloc(%zu): %zu of %d blocks at most %zu bytes usable, expected %d or more",
                   size, in_class, PER_SIZE, pow + pow / 8, IN_CLASS_MIN);
        for (size_t i = 0; i < PER_SIZE; i++)
          T (free) (live[i]);
      }
  g_free (live);
}

/* Allocates n blocks of size into blocks, then frees every other one
 * (their slots become NULL): free blocks spread over the class's runs. */
static void
alloc_then_free_alternate (void **blocks, size_t n, size_t size)
{
  for (size_t i = 0; i < n; i++)
    {
      blocks[i] = T (malloc) (size);
      g_assert_nonnull (blocks[i]);
    }
  for (size_t i = 0; i < n; i += 2)
    {
      T (free) (blocks[i]);
      blocks[i] = NULL;
    }
}

/* Allocates n blocks of size into blocks, each filled with fill: each
 * must be a block of its own class or a free block of the larger class
 * standing in for it. Returns how many stood in. */
static size_t
alloc_counting_stand_ins (void **blocks, size_t n, size_t size, size_t larger, int fill)
{
  size_t stand_ins = 0;
  for (size_t i = 0; i < n; i++)
    {
      blocks[i] = T (malloc) (size);
      g_assert_nonnull (blocks[i]);
      size_t us = T (malloc_usable_size) (blocks[i]);
      if (us != size && us != larger)
        g_error ("malloc(%zu): usable size %zu, expected %zu or a free %zu-byte block",
                 size, us, size, larger);
      stand_ins += us == larger;
      memset (blocks[i], fill, us);
    }
  return stand_ins;
}

/* A class with no free block of its own takes free blocks of a larger class
 * (at most twice its size) that are already in memory, before it makes a
 * new run; only classes whose blocks are aligned at least as well stand in,
 * so a 64-byte request never gets an 80- or 96-byte block (memalign relies
 * on 64-byte blocks being 64-aligned). A fresh process, so that the 80- and
 * 64-byte classes have no runs yet. */
static void
test_larger_class_stands_in (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  enum { N = 4096 };
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  void **big = g_new0 (void *, N);
  void **small = g_new0 (void *, N);
  alloc_then_free_alternate (big, N, 96);
  /* 2048 free 96-byte blocks, most of them back on their runs */
  for (size_t i = 0; i < N / 4; i++)
    {
      small[i] = T (malloc) (64);
      g_assert_nonnull (small[i]);
      size_t us = T (malloc_usable_size) (small[i]);
      if (us != 64 && us != 128)
        g_error ("malloc(64): usable size %zu: a block not 64-aligned by class stood in", us);
      g_assert_cmpuint ((uintptr_t) small[i] % 64, ==, 0);
    }
  size_t stand_ins = 0;
  for (size_t i = N / 4; i < N / 2; i++)
    {
      small[i] = T (malloc) (80);
      g_assert_nonnull (small[i]);
      size_t us = T (malloc_usable_size) (small[i]);
      if (us != 80 && us != 96)
        g_error ("malloc(80): usable size %zu, expected 80 or a free 96-byte block", us);
      stand_ins += us == 96;
      memset (small[i], 0x5A, us);
    }
  g_assert_cmpuint (stand_ins, >, 0);
  for (size_t i = 0; i < N; i++)
    {
      T (free) (big[i]);
      T (free) (small[i]);
    }
  g_free (big);
  g_free (small);
}

/* The free blocks of a larger class may all sit in its current run (a
 * class with fewer live blocks than a run holds, the usual case in a
 * thread that makes blocks for another): they stand in too. Only partly
 * used runs other than the current one were looked at, so the 64 tiny
 * classes of producer_consumer each carved to their own highest count
 * (1,429 KiB carved for about 530 KiB in flight, peak RSS 3.2 MiB; 1,137
 * KiB and 2.9 MiB since). Fresh process: the 240-byte class has no run. */
static void
test_current_run_stands_in (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  enum { BIG = 200, SMALL = 16 };   /* 200 blocks of 256 B: one run */
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  void *big[BIG], *small[SMALL];
  for (size_t i = 0; i < BIG; i++)
    {
      big[i] = T (malloc) (256);
      g_assert_nonnull (big[i]);
    }
  for (size_t i = 0; i < BIG; i++)   /* the bin fills, then half goes back to the run */
    T (free) (big[i]);
  size_t stand_ins = alloc_counting_stand_ins (small, SMALL, 240, 256, 0x3C);
  if (!stand_ins)
    g_error ("no free 256-byte block of the current run stood in for 240 bytes: a new run was made");
  for (size_t i = 0; i < SMALL; i++)
    T (free) (small[i]);
}

/* Between 256 B and 1 KiB malloc's classes serve no aligned request (the
 * quarters kept for those do), so a larger class's free blocks stand in
 * for them whatever their alignment: free 400-byte blocks (16-aligned) for
 * 320 bytes (a 64-byte multiple), which took only 64-aligned classes
 * before and so made a run of its own here. Aligned requests of those
 * sizes still get aligned blocks of the quarters. Fresh process: the
 * 320-byte class has no run. */
static void
test_unaligned_class_stands_in_above_256 (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  enum { BIG = 400, SMALL = 64 };   /* 400 blocks of 400 B: 3 runs */
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  void *big[BIG], *small[SMALL], *aligned[SMALL];
  alloc_then_free_alternate (big, BIG, 400);
  size_t stand_ins = alloc_counting_stand_ins (small, SMALL, 320, 400, 0x6B);
  if (!stand_ins)
    g_error ("no free 400-byte block stood in for 320 bytes: a new run was made");
  for (size_t i = 0; i < SMALL; i++)
    {
      g_assert_cmpint (T (posix_memalign) (&aligned[i], 64, 320), ==, 0);
      g_assert_cmpuint ((uintptr_t) aligned[i] % 64, ==, 0);
      /* from the 320-byte quarter, or a larger class whose blocks all
       * start on 64 bytes standing in (512 B when a decay tick has just
       * put blocks back in that class's runs: seen once in 30 runs with
       * HAKMEM_DECAY_MS=1), never the 400-byte blocks */
      size_t usable = T (malloc_usable_size) (aligned[i]);
      g_assert_cmpuint (usable, >=, 320);
      g_assert_cmpuint (usable % 64, ==, 0);
    }
  for (size_t i = 0; i < SMALL; i++)
    {
      T (free) (small[i]);
      T (free) (aligned[i]);
    }
  for (size_t i = 0; i < BIG; i++)
    T (free) (big[i]);
}

/* A double free of a block that a smaller class took over while it was
 * free (so it sits in that class's bin) is still caught and ignored: no
 * block is ever handed out twice. Fresh process, HAKMEM_ON_ERROR=warn. */
static void
test_stand_in_double_free (void)
{
  enum { N = 4096 };
  if (!g_test_subprocess ())
    {
      g_setenv ("HAKMEM_ON_ERROR", "warn", TRUE);
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_unsetenv ("HAKMEM_ON_ERROR");
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr ("*double free*");
      return;
    }
  void **big = g_new0 (void *, N);
  void **small = g_new0 (void *, N / 8);
  void **more = g_new0 (void *, 2 * N);
  GHashTable *live = g_hash_table_new (NULL, NULL);
  for (size_t i = 0; i < N; i++)
    big[i] = T (malloc) (96);
  for (size_t i = 0; i < N; i += 2)
    T (free) (big[i]);
  for (size_t i = 0; i < N / 8; i++)   /* some take free 96-byte blocks */
    {
      small[i] = T (malloc) (80);
      g_hash_table_add (live, small[i]);
    }
  size_t doubles = 0;
  for (size_t i = 0; i < N; i += 2)    /* free again: those still free */
    if (!g_hash_table_contains (live, big[i]))
      {
        T (free) (big[i]);
        doubles++;
      }
  g_assert_cmpuint (doubles, >, 0);
  for (size_t i = 1; i < N; i += 2)
    g_assert_true (g_hash_table_add (live, big[i]));
  for (size_t i = 0; i < 2 * N; i++)
    {
      more[i] = T (malloc) (i & 1 ? 96 : 80);
      if (!g_hash_table_add (live, more[i]))
        g_error ("%p handed out twice after the double frees", more[i]);
    }
  ht_free_keys_and_destroy (live);
  g_free (big);
  g_free (small);
  g_free (more);
}

/* A thread's first misses of a mid class that has nothing resident take a
 * free block of a slightly larger class from the thread's own bin instead
 * of carving new pages, a bounded number of times (HAK_STANDIN_MAX), after
 * which the class gets blocks of its own. Fresh process: neither the
 * 40 KiB nor the 48 KiB class has a run. */
static void
test_bin_block_stands_in (void)
{
  if (!ht_pool_bins_or_skip ("no Pool TLS box: mid blocks go back to their runs, through no bin"))
    return;
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  char *big = T (malloc) (48 * HT_KiB);
  g_assert_nonnull (big);
  g_assert_cmpuint (T (malloc_usable_size) (big), ==, 48 * HT_KiB);
  memset (big, 0x11, 48 * HT_KiB);
  T (free) (big);
  unsigned stood_in = 0, tries = 0;
  char *own = NULL;
  while (!own && tries++ < 64)
    {
      char *q = T (malloc) (40 * HT_KiB);
      g_assert_nonnull (q);
      size_t us = T (malloc_usable_size) (q);
      memset (q, 0x22, us);
      if (us == 48 * HT_KiB)
        {
          /* the freed 48 KiB block, handed out for 40 KiB; back to its bin */
          g_assert_true (q == big);
          stood_in++;
          T (free) (q);
        }
      else
        {
          g_assert_cmpuint (us, ==, 40 * HT_KiB);
          own = q;
        }
    }
  g_assert_cmpuint (stood_in, >, 0);
  g_assert_nonnull (own);   /* the stand-ins stop: the class carves its own */
  g_assert_cmpuint (stood_in, <, 64);
  /* and the class keeps using its own block from then on */
  T (free) (own);
  char *again = T (malloc) (40 * HT_KiB);
  g_assert_true (again == own);
  T (free) (again);
}

static void
test_large_sizes (void)
{
  const size_t sizes[] = {
    256 * HT_KiB + 1, 300000, 2 * HT_MiB - 1, 2 * HT_MiB + 1, 4 * HT_MiB - 1,
    4 * HT_MiB, 4 * HT_MiB + 1, 17 * HT_MiB + 3, 64 * HT_MiB,
  };
  Block b[G_N_ELEMENTS (sizes) * 2];
  size_t n = 0;

  for (int copy = 0; copy < 2; copy++)
    for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
      {
        alloc_block (&b[n], sizes[i], n + 1);
        n++;
      }
  check_all (b, n);
  for (size_t i = 0; i < n; i++)
    {
      check_block (&b[i]);
      T (free) (b[i].p);
    }

  /* Allocate and free the same large size repeatedly (span cache reuse):
   * fresh content each time. */
  for (int i = 0; i < 50; i++)
    {
      Block x;
      alloc_block (&x, 4 * HT_MiB + (size_t) i * 4096, (uint64_t) i);
      check_block (&x);
      T (free) (x.p);
    }
}

/* Many blocks of every tiny/mid class at once, more than one slab's worth. */
static void
test_many_live_per_class (void)
{
  size_t bounds[128];
  size_t nb = boundary_sizes (bounds);
  size_t n = 0, cap = 0;

  for (size_t i = 0; i < nb && bounds[i] <= 64 * HT_KiB; i++)
    cap += bounds[i] <= 1024 ? 600 : bounds[i] <= 8192 ? 80 : 12;
  Block *b = g_new0 (Block, cap);

  for (size_t i = 0; i < nb && bounds[i] <= 64 * HT_KiB; i++)
    {
      size_t count = bounds[i] <= 1024 ? 600 : bounds[i] <= 8192 ? 80 : 12;
      for (size_t k = 0; k < count; k++)
        {
          alloc_block (&b[n], bounds[i] - (k % 3), n);
          n++;
        }
    }
  g_assert_cmpuint (n, ==, cap);
  check_all (b, n);
  for (size_t i = 0; i < n; i++)
    {
      check_block (&b[i]);
      T (free) (b[i].p);
    }
  g_free (b);
}

/* KiB carved so far over all classes, each class's rounded down (as the
 * stats report prints them): memory written once, resident since. */
static unsigned long long
stats_carved_kib (void)
{
  struct hak_stats s = ht_stats ();
  unsigned long long total = 0;
  for (uint32_t c = 0; c < s.nclasses; c++)
    if (s.classes[c].refills)
      total += s.classes[c].carved_blocks * s.classes[c].size >> 10;
  return total;
}

/* Each class is carved up to its own highest live count, so on a random
 * mix of sizes what a heap keeps resident is the sum of those highs, which
 * grows with the number of classes: with a class per 16 B up to 1 KiB,
 * 2048 random slots of 16-1024 B carved 1.59 times the peak of the
 * requested bytes live (1,718 KiB); with four classes per doubling above
 * 256 B, 1.26 (1,360 KiB), internal waste included. Fresh process:
 * nothing carved before. */
static void
test_random_mix_carves_near_live (void)
{
  enum { SLOTS = 2048, STEPS = 200000 };
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  void **slot = g_new0 (void *, SLOTS);
  size_t *size = g_new0 (size_t, SLOTS);
  size_t live = 0, peak = 0;
  GRand *rng = g_rand_new_with_seed (42);
  unsigned long long before = stats_carved_kib ();
  for (size_t i = 0; i < SLOTS + STEPS; i++)
    {
      size_t k = i < SLOTS ? i : (size_t) g_rand_int_range (rng, 0, SLOTS);
      if (slot[k])
        {
          T (free) (slot[k]);
          live -= size[k];
        }
      size[k] = (size_t) g_rand_int_range (rng, 16, 1025);
      slot[k] = T (malloc) (size[k]);
      g_assert_nonnull (slot[k]);
      *(char *) slot[k] = 1;
      live += size[k];
      peak = live > peak ? live : peak;
    }
  unsigned long long carved = stats_carved_kib () - before;
  g_test_message ("carved %llu KiB for a peak of %zu KiB live", carved, peak / HT_KiB);
  /* the hardened box adds 24 bytes to each block (canary, size word, next
   * block's head guard): 2048 live blocks' worth of them on top; and its
   * quarantine keeps up to HAKMEM_QUARANTINE_KB (128 KiB by default) of
   * freed blocks out of reuse by design */
  size_t guards = ht_safety_hardened () ? (size_t) SLOTS * 24 + 128 * HT_KiB : 0;
  g_assert_cmpuint (carved * HT_KiB, <=, peak * 14 / 10 + guards);
  for (size_t k = 0; k < SLOTS; k++)
    T (free) (slot[k]);
  g_rand_free (rng);
  g_free (size);
  g_free (slot);
}

/* Strings appended to (1-24 bytes at a time), their buffers grown by half
 * by realloc when full, up to 2 KiB; one append in 64 frees its string
 * instead. Every growth moves the block to a larger class and leaves the
 * old one behind. Those above 256 B go back to their runs (api/api.c,
 * free_moved), where they serve other classes too, not to the thread's
 * bin, where only a request of their own class would take them: the
 * resident set grows by 1.84-1.98 times the peak of live capacity here
 * (it varies from run to run; a few percent more in a sanitizer build),
 * 2.7 times when blocks up to 1040 B stayed in the bin. The bound sits
 * between the two. */
static void
test_realloc_grown_strings_resident_near_live (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  enum { STRINGS = 10000, STEPS = 4000000, MAX_LEN = 2048 };
  if (HT_TSAN)
    {
      g_test_skip ("ThreadSanitizer's shadow of the strings counts in the resident set");
      return;
    }
  if (!ht_partial_purge_or_skip ("under hugepage a SuperSlab is resident whole (one 2 MiB page): "
                                 "the resident set does not follow the pages runs touch"))
    return;
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  char **str = g_new0 (char *, STRINGS);
  size_t *len = g_new0 (size_t, STRINGS), *cap = g_new0 (size_t, STRINGS);
  size_t live = 0, peak = 0;
  GRand *rng = g_rand_new_with_seed (7);
  size_t rss_before = ht_rss_bytes ();
  for (size_t i = 0; i < STEPS; i++)
    {
      size_t k = (size_t) g_rand_int_range (rng, 0, STRINGS);
      size_t add = (size_t) g_rand_int_range (rng, 1, 25);
      if (len[k] + add + 1 > MAX_LEN || g_rand_int_range (rng, 0, 64) == 0)
        {
          T (free) (str[k]);
          live -= cap[k];
          str[k] = NULL;
          len[k] = cap[k] = 0;
          continue;
        }
      if (len[k] + add + 1 > cap[k])
        {
          size_t grown = cap[k] ? cap[k] + cap[k] / 2 : 15;
          while (grown < len[k] + add + 1)
            grown += grown / 2;
          g_assert_nonnull (str[k] = T (realloc) (str[k], grown));
          live = live - cap[k] + grown;
          cap[k] = grown;
          peak = live > peak ? live : peak;
        }
      memset (str[k] + len[k], 'a', add);
      len[k] += add;
    }
  size_t grown = ht_rss_bytes () - rss_before;
  g_test_message ("resident set grew by %zu KiB for a peak of %zu KiB live", grown / HT_KiB, peak / HT_KiB);
  g_assert_cmpuint (grown, <=, peak * 9 / 4);
  for (size_t k = 0; k < STRINGS; k++)
    T (free) (str[k]);
  g_rand_free (rng);
  g_free (cap);
  g_free (len);
  g_free (str);
}

/* A new run goes where there is room in the heap's SuperSlabs before the
 * heap takes another one, however many of them are full or have only a
 * short stretch of free slabs (backend/heap_runs.c keeps those with room in
 * buckets by their longest free stretch). Runs of 112 KiB blocks are 7
 * slabs (16 blocks), so each SuperSlab they fill keeps a stretch of 3
 * free slabs; 20 KiB blocks have 1-slab runs of 3, which fit there. */
enum { WIDE_SIZE = 112 * HT_KiB, WIDE_BLOCKS = 20 * 16, NARROW_SIZE = 20 * HT_KiB, NARROW_BLOCKS = 60 };

static void
test_runs_fill_short_stretches (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  void *wide[WIDE_BLOCKS], *narrow[NARROW_BLOCKS];
  unsigned long long before = ht_stats ().ss_acquired;
  ht_alloc_filled (wide, WIDE_BLOCKS, WIDE_SIZE, 0x11);
  unsigned long long filled = ht_stats ().ss_acquired;
  g_test_message ("%llu SuperSlabs for %d blocks of %d KiB", filled - before, WIDE_BLOCKS,
                  (int) (WIDE_SIZE / HT_KiB));
  g_assert_cmpuint (filled - before, >=, WIDE_BLOCKS / 16);   /* what the rest of the test assumes */
  ht_alloc_filled (narrow, NARROW_BLOCKS, NARROW_SIZE, 0x22);
  unsigned long long after = ht_stats ().ss_acquired;
  if (after != filled)
    g_error ("%llu more SuperSlabs for %d blocks of %d KiB, with room for them in %llu",
             after - filled, NARROW_BLOCKS, (int) (NARROW_SIZE / HT_KiB), filled - before);
  for (int i = 0; i < NARROW_BLOCKS; i++)
    g_assert_cmpint (*(unsigned char *) narrow[i], ==, 0x22);
  for (int i = 0; i < WIDE_BLOCKS; i++)
    T (free) (wide[i]);
  for (int i = 0; i < NARROW_BLOCKS; i++)
    T (free) (narrow[i]);
}

/* The scan of SuperSlabs for room gives up, within the bucket of a run's
 * own length, after 16 whose free stretch is too short; it must then look
 * at the rest of that bucket before taking a new SuperSlab. A thread's
 * heap fills SuperSlabs with 64 KiB blocks (a slab each; HAKMEM_POOL=none,
 * so frees go straight back to the runs), frees 7 slabs in a row in the
 * first one and 5 in a row in 16 others, then allocates a 112 KiB block
 * (a run of 7 slabs): it goes in the first one. */
enum { SLAB = 64 * 1024, SLABS = 31, SHORT_ONES = 16, FULL_SS = SHORT_ONES + 2 };
#define SS_OF(p) ((uintptr_t) (p) & ~(uintptr_t) (2 * HT_MiB - 1))
#define SLAB_OF(p) ((unsigned) (((uintptr_t) (p) / SLAB) % 32))

static void **misfit_blocks;
static size_t misfit_count;

static void
free_stretch (uintptr_t ss, unsigned first, unsigned n)
{
  for (size_t i = 0; i < misfit_count; i++)
    {
      void *b = misfit_blocks[i];
      if (b && SS_OF (b) == ss && SLAB_OF (b) >= first && SLAB_OF (b) < first + n)
        {
          T (free) (b);
          misfit_blocks[i] = NULL;
        }
    }
}

/* No GLib call allocates in here: the thread's heap holds only its blocks. */
static void *
fit_past_misfits (void *arg)
{
  uintptr_t *result = arg, full[FULL_SS];
  size_t nfull = 0;
  while (nfull < FULL_SS && misfit_count < (FULL_SS + 2) * SLABS)
    {
      void *b = T (malloc) (SLAB);
      if (!b)
        return NULL;
      misfit_blocks[misfit_count++] = b;
      if (SLAB_OF (b) == SLABS)   /* the last slab: this SuperSlab is full */
        full[nfull++] = SS_OF (b);
    }
  if (nfull < FULL_SS)
    return NULL;
  free_stretch (full[0], 10, 7);
  for (unsigned k = 1; k <= SHORT_ONES; k++)
    free_stretch (full[k], 10, 5);
  void *wide = T (malloc) (7 * 16 * HT_KiB);
  result[0] = full[0];
  result[1] = SS_OF (wide);
  T (free) (wide);
  for (size_t i = 0; i < misfit_count; i++)
    T (free) (misfit_blocks[i]);
  return NULL;
}

static void
test_run_finds_room_past_misfits (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  if (!g_test_subprocess ())
    {
      g_setenv ("HAKMEM_POOL", "none", TRUE);
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  misfit_blocks = g_new0 (void *, (FULL_SS + 2) * SLABS);
  uintptr_t result[2] = { 0, 0 };
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, fit_past_misfits, result), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  g_assert_cmpuint (result[0], !=, 0);   /* the heap filled its SuperSlabs as assumed */
  if (result[1] != result[0])
    g_error ("a run of 7 slabs went to %#lx, not to the SuperSlab with 7 free slabs %#lx",
             (unsigned long) result[1], (unsigned long) result[0]);
  g_free (misfit_blocks);
}

/* The classes from 256 B to 1 KiB are sized so that a slab's blocks start
 * on most lines of a page (size_class.h): their first lines, which
 * programs touch most, then spread over the cache's sets. A slab's worth
 * of blocks of each class, in a fresh process (each class's first run,
 * carved in address order), must start on at least 48 of a page's 64
 * lines; 1024-byte classes would start on 4, 512-byte ones on 8. */
static void
test_blocks_start_on_most_lines (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  if (!ht_in_fresh_process ())
    return;
  size_t last = 0;
  for (size_t want = 257; want <= 1024; want++)
    {
      void *probe = T (malloc) (want);
      size_t size = T (malloc_usable_size) (probe);
      T (free) (probe);
      if (size == last)
        continue;
      last = size;
      size_t n = 65536 / size;
      void **blocks = g_new0 (void *, n);
      guint64 lines = 0;
      for (size_t i = 0; i < n; i++)
        {
          blocks[i] = T (malloc) (size);
          g_assert_nonnull (blocks[i]);
          lines |= (guint64) 1 << ((uintptr_t) blocks[i] % 4096 / 64);
        }
      int count = __builtin_popcountll (lines);
      g_test_message ("%zu-byte blocks start on %d lines of 64", size, count);
      if (count < 48)
        g_error ("%zu-byte blocks start on only %d of a page's 64 lines", size, count);
      for (size_t i = 0; i < n; i++)
        T (free) (blocks[i]);
      g_free (blocks);
    }
  g_assert_cmpuint (last, >=, 1024);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/sizes/every-size-0-4096", test_every_small_size);
  g_test_add_func ("/sizes/class-boundaries", test_class_boundaries);
  g_test_add_func ("/sizes/usable-bound", test_usable_bound);
  g_test_add_func ("/sizes/power-of-two-plus-header", test_power_of_two_plus_header);
  g_test_add_func ("/sizes/usable-near-glibc", test_usable_near_glibc);
  g_test_add_func ("/sizes/badly-fitting-class-end-to-end", test_badly_fitting_class_end_to_end);
  g_test_add_func ("/sizes/larger-class-stands-in", test_larger_class_stands_in);
  g_test_add_func ("/sizes/stand-in-double-free", test_stand_in_double_free);
  g_test_add_func ("/sizes/current-run-stands-in", test_current_run_stands_in);
  g_test_add_func ("/sizes/unaligned-class-stands-in-above-256", test_unaligned_class_stands_in_above_256);
  g_test_add_func ("/sizes/bin-block-stands-in", test_bin_block_stands_in);
  g_test_add_func ("/sizes/large", test_large_sizes);
  g_test_add_func ("/sizes/many-live-per-class", test_many_live_per_class);
  g_test_add_func ("/sizes/random-mix-carves-near-live", test_random_mix_carves_near_live);
  g_test_add_func ("/sizes/realloc-grown-strings-resident-near-live", test_realloc_grown_strings_resident_near_live);
  g_test_add_func ("/sizes/runs-fill-short-stretches", test_runs_fill_short_stretches);
  g_test_add_func ("/sizes/run-finds-room-past-misfits", test_run_finds_room_past_misfits);
  g_test_add_func ("/sizes/blocks-start-on-most-lines", test_blocks_start_on_most_lines);

  return g_test_run ();
}
