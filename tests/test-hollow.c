/* Hollow runs (backend/heap_hollow.c): after a large drop, the pages of
 * free blocks inside runs that still have live blocks go back to the OS
 * as the program grows again elsewhere, about as many as it takes; the
 * blocks stay usable, double frees of them are still caught, and a steady
 * heap gives nothing back. Each
 * case runs in a fresh process with HAKMEM_DECAY_MS=60000 (no tick comes
 * during a case; the drop alone decides). */
#include "hakmem-test.h"

#include <pthread.h>
#include <sys/mman.h>

/* 2 KiB blocks, 16 MiB: every eighth one stays live, so each group of
 * four pages keeps its first one (a live block and a free one) and gives
 * back the other three. */
enum { N = 8192, SIZE = 2048, KEEP_EVERY = 8 };
static void *blocks[N];
#define HOLLOW_SKIP "the hugepage SuperSlab box hollows no runs: it gives pages back only with whole SuperSlabs"

static gboolean
in_process (const char *on_error)
{
  if (g_test_subprocess ())
    return TRUE;
  g_setenv ("HAKMEM_DECAY_MS", "60000", TRUE);
  if (on_error)
    g_setenv ("HAKMEM_ON_ERROR", on_error, TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_ON_ERROR");
  g_test_trap_assert_passed ();
  return FALSE;
}

static int
page_resident (const void *p)
{
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);
  unsigned char v = 0;
  g_assert_cmpint (mincore ((void *) ((uintptr_t) p & ~(uintptr_t) (page - 1)), page, &v), ==, 0);
  return v & 1;
}

static unsigned long long
stats_hollow_blocks (void)
{
  return ht_stats ().hollowed_blocks;
}

/* Allocates `count` blocks of a class no case frees blocks of (new runs:
 * the heap grows), then frees them. */
static void
grow_elsewhere (size_t count)
{
  void **other = g_new (void *, count);
  for (size_t i = 0; i < count; i++)
    g_assert_nonnull (other[i] = T (malloc) (3000));
  for (size_t i = 0; i < count; i++)
    T (free) (other[i]);
  g_free (other);
}
/* 12 MiB of 3,000-byte blocks: about as much as a case's drop. */
enum { GROW_BLOCKS = 4096 };

/* Builds the heap: blocks[], with nbig blocks of big_size bytes into big[]
 * spread among them. */
static void
build_heap (void **big, size_t nbig, size_t big_size)
{
  for (size_t i = 0; i < N; i++)
    {
      if (nbig && i % (N / nbig) == 0)
        {
          size_t b = i / (N / nbig);
          g_assert_nonnull (big[b] = T (malloc) (big_size));
          ht_fill (big[b], big_size, b);
        }
      blocks[i] = T (malloc) (SIZE);
      g_assert_nonnull (blocks[i]);
      ht_fill (blocks[i], SIZE, i);
    }
}

/* Frees all but every KEEP_EVERY-th block (blocks[] keeps the freed
 * pointers, live[] the others). Returns the live count. */
static size_t
drop_all_but_every_kth (void **live)
{
  size_t nlive = 0;
  for (size_t i = 0; i < N; i++)
    if (i % KEEP_EVERY == 0)
      {
        live[nlive++] = blocks[i];
        blocks[i] = NULL;
      }
    else
      T (free) (blocks[i]);
  return nlive;
}

/* The drop, then growth elsewhere by about as much (new runs of another
 * class). Returns the live count. */
static size_t
drop_then_allocate (void **live)
{
  build_heap (NULL, 0, 0);
  size_t nlive = drop_all_but_every_kth (live);
  grow_elsewhere (GROW_BLOCKS);
  return nlive;
}

static size_t
freed_pages_resident (size_t *total)
{
  size_t resident = 0;
  *total = 0;
  for (size_t i = 0; i < N; i++)
    if (blocks[i])
      {
        resident += (size_t) page_resident (blocks[i]);
        (*total)++;
      }
  return resident;
}

static void
check_live (void *const *live, size_t nlive)
{
  for (size_t i = 0; i < nlive; i++)
    ht_assert_pattern (live[i], SIZE, i * KEEP_EVERY);
}

/* The freed blocks' pages go back, the live blocks keep their contents,
 * and the freed blocks are handed out again (their pages fault back in),
 * none twice and none over a live one. */
/* Runs of whole-page blocks laid end to end (backend/superslab.h,
 * hak_size_page_starts: 24 KiB blocks, eight in three slabs) are made
 * hollow too: one block in eight live keeps each run in use, and the
 * pages of the others go back. */
static void
test_whole_page_blocks_hollow (void)
{
  enum { WN = 640, WSIZE = 24 * 1024 };
  if (!ht_partial_purge_or_skip (HOLLOW_SKIP))
    return;
  if (!ht_plain_blocks_or_skip ("the hardened box's blocks are of a larger class than the request's"))
    return;
  if (!in_process (NULL))
    return;
  void **w = g_new0 (void *, WN);
  unsigned long long before = stats_hollow_blocks ();
  for (size_t i = 0; i < WN; i++)
    {
      g_assert_nonnull (w[i] = T (malloc) (WSIZE));
      ht_fill (w[i], WSIZE, i);
    }
  for (size_t i = 0; i < WN; i++)
    if (i % KEEP_EVERY)
      T (free) (w[i]);
  grow_elsewhere (GROW_BLOCKS);
  size_t total = 0, resident = 0;
  for (size_t i = 0; i < WN; i++)
    if (i % KEEP_EVERY)
      {
        resident += (size_t) page_resident (w[i]);
        total++;
      }
  unsigned long long hollow = stats_hollow_blocks () - before;
  g_test_message ("first pages of %zu freed 24 KiB blocks: %zu resident; %llu blocks made hollow", total,
                  resident, hollow);
  /* a bin keeps up to 2 MiB of them (85 blocks) */
  if (resident > total / 2)
    g_error ("%zu of %zu freed 24 KiB blocks' first pages still resident", resident, total);
  g_assert_cmpuint (hollow, >, 0);
  for (size_t i = 0; i < WN; i += KEEP_EVERY)
    {
      ht_assert_pattern (w[i], WSIZE, i);
      T (free) (w[i]);
    }
  g_free (w);
}

static void
test_drop_gives_back_free_pages (void)
{
  if (!ht_partial_purge_or_skip (HOLLOW_SKIP))
    return;
  if (!in_process (NULL))
    return;
  void **live = g_new0 (void *, N / KEEP_EVERY + 1);
  unsigned long long before = stats_hollow_blocks ();
  size_t nlive = drop_then_allocate (live);
  size_t total, resident = freed_pages_resident (&total);
  unsigned long long hollow = stats_hollow_blocks () - before;
  g_test_message ("first pages of %zu freed blocks: %zu resident; %llu blocks made hollow", total,
                  resident, hollow);
  /* a bin keeps up to 2 MiB of them (1,024 blocks), and a freed block
   * beside a live one keeps its page */
  if (resident > total / 2)
    g_error ("%zu of %zu freed blocks' first pages still resident after a 14 MiB drop", resident, total);
  g_assert_cmpuint (hollow, >, 0);
  check_live (live, nlive);

  size_t n = N - nlive;
  HtRange *r = g_new (HtRange, N);
  for (size_t i = 0; i < n; i++)
    {
      blocks[i] = T (malloc) (SIZE);
      g_assert_nonnull (blocks[i]);
      ht_fill (blocks[i], SIZE, 1000000 + i);
      r[i] = (HtRange){ (uintptr_t) blocks[i], (uintptr_t) blocks[i] + SIZE };
    }
  for (size_t i = 0; i < nlive; i++)
    r[n + i] = (HtRange){ (uintptr_t) live[i], (uintptr_t) live[i] + SIZE };
  ht_assert_disjoint (r, N);
  check_live (live, nlive);
  for (size_t i = 0; i < n; i++)
    {
      ht_assert_pattern (blocks[i], SIZE, 1000000 + i);
      T (free) (blocks[i]);
    }
  for (size_t i = 0; i < nlive; i++)
    T (free) (live[i]);
  g_free (r);
  g_free (live);
}

/* A heap that grows by a little after a large drop gives back about as
 * much as it grows, not the whole drop: the program may take the rest
 * again, and purging it would only have it fault back in (fragment's
 * next phase reuses much of what its drop freed). 750 KB of another class
 * after a 14 MiB drop of 2 KiB blocks. */
static void
test_small_growth_hollows_little (void)
{
  if (!ht_partial_purge_or_skip (HOLLOW_SKIP))
    return;
  if (!in_process (NULL))
    return;
  void **live = g_new0 (void *, N / KEEP_EVERY + 1);
  build_heap (NULL, 0, 0);
  size_t nlive = drop_all_but_every_kth (live);
  unsigned long long before = stats_hollow_blocks ();
  grow_elsewhere (256);
  unsigned long long hollow = stats_hollow_blocks () - before;
  size_t total, resident = freed_pages_resident (&total);
  g_test_message ("%llu blocks made hollow; first pages of %zu freed blocks: %zu resident", hollow, total,
                  resident);
  g_assert_cmpuint (hollow, >, 0);   /* the growth did give some back */
  /* 750 KB is 375 such blocks; the runs hollowed first may hold a few more */
  if (hollow > 1024)
    g_error ("%llu blocks of 2 KiB made hollow for a growth of 750 KB", hollow);
  if (resident < total / 2)
    g_error ("%zu of %zu freed blocks' first pages given back for a growth of 750 KB", total - resident, total);
  check_live (live, nlive);
  for (size_t i = 0; i < nlive; i++)
    T (free) (live[i]);
  g_free (live);
}

/* A new run on slabs that earlier runs left resident (dirty) adds no
 * memory, so it makes no run hollow: after the drop, 16 KiB blocks freed
 * whole leave 4 MiB of such slabs, and 750 KB of another class fits on
 * them. */
static void
test_growth_on_dirty_slabs_hollows_nothing (void)
{
  enum { BIG = 256, BIG_SIZE = 16 * 1024 };
  if (!ht_partial_purge_or_skip (HOLLOW_SKIP))
    return;
  if (!in_process (NULL))
    return;
  /* the big blocks among the small ones, so that each SuperSlab with a
   * run of them keeps live small blocks and stays with the heap: one
   * emptied whole goes back to the SuperSlab pool, its slabs no longer
   * the heap's dirty ones (where it does depends on the address layout) */
  void **big = g_new (void *, BIG);
  build_heap (big, BIG, BIG_SIZE);
  void **live = g_new0 (void *, N / KEEP_EVERY + 1);
  size_t nlive = drop_all_but_every_kth (live);
  for (size_t i = 0; i < BIG; i++)
    T (free) (big[i]);
  unsigned long long before = stats_hollow_blocks ();
  grow_elsewhere (256);
  unsigned long long hollow = stats_hollow_blocks () - before;
  g_test_message ("%llu blocks made hollow for 750 KB on dirty slabs", hollow);
  g_assert_cmpuint (hollow, ==, 0);
  /* past those slabs the heap grows, and hollows again */
  grow_elsewhere (GROW_BLOCKS);
  g_assert_cmpuint (stats_hollow_blocks () - before, >, 0);
  check_live (live, nlive);
  for (size_t i = 0; i < nlive; i++)
    T (free) (live[i]);
  g_free (live);
  g_free (big);
}

/* Blocks of a class whose pages are resident are handed out before its
 * hollow ones, whose pages would fault in again (fragment's next phase
 * took about 4,700 hollow blocks back while others were free and
 * resident). The runs become partly used in address order and mostly
 * free in the reverse one, so that the runs made hollow first are the
 * first ones on their class's list. */
static void
test_resident_blocks_before_hollow (void)
{
  if (!ht_partial_purge_or_skip (HOLLOW_SKIP))
    return;
  if (!in_process (NULL))
    return;
  void **live = g_new0 (void *, N / KEEP_EVERY + 1);
  size_t nlive = 0;
  for (size_t i = 0; i < N; i++)
    {
      g_assert_nonnull (blocks[i] = T (malloc) (SIZE));
      ht_fill (blocks[i], SIZE, i);
      if (i % KEEP_EVERY == 0)
        live[nlive++] = blocks[i];
    }
  for (size_t i = 0; i < N; i++)
    if (i % KEEP_EVERY == 1)
      T (free) (blocks[i]);
  for (size_t i = N; i-- > 0;)
    if (i % KEEP_EVERY > 1)
      T (free) (blocks[i]);
  unsigned long long before = stats_hollow_blocks ();
  grow_elsewhere (256);
  g_assert_cmpuint (stats_hollow_blocks () - before, >, 0);
  GHashTable *hollow = g_hash_table_new (NULL, NULL);
  size_t freed = 0;
  for (size_t i = 0; i < N; i++)
    if (i % KEEP_EVERY)
      {
        freed++;
        if (!page_resident (blocks[i]))
          g_hash_table_add (hollow, blocks[i]);
      }
  size_t nhollow = g_hash_table_size (hollow);
  g_assert_cmpuint (nhollow, >, 0);
  /* half the resident free blocks */
  size_t n = (freed - nhollow) / 2, taken = 0;
  void **again = g_new (void *, n);
  for (size_t i = 0; i < n; i++)
    {
      g_assert_nonnull (again[i] = T (malloc) (SIZE));
      taken += g_hash_table_contains (hollow, again[i]);
      ht_fill (again[i], SIZE, 2000000 + i);
    }
  g_test_message ("%zu freed blocks, %zu hollow; %zu of %zu handed out again were hollow", freed, nhollow,
                  taken, n);
  g_assert_cmpuint (taken, ==, 0);
  for (size_t i = 0; i < nlive; i++)
    ht_assert_pattern (live[i], SIZE, i * KEEP_EVERY);
  for (size_t i = 0; i < n; i++)
    {
      ht_assert_pattern (again[i], SIZE, 2000000 + i);
      T (free) (again[i]);
    }
  for (size_t i = 0; i < nlive; i++)
    T (free) (live[i]);
  g_free (again);
  g_hash_table_destroy (hollow);
  g_free (live);
}

/* A freed block whose page went back has lost its free mark: freeing it
 * again must still be reported (and do nothing, with warn), and so must a
 * realloc of it; no block may then be handed out twice. */
static void
test_hollow_double_free_caught (void)
{
  if (!ht_partial_purge_or_skip (HOLLOW_SKIP))
    return;
  if (!in_process ("warn"))
    {
      g_test_trap_assert_stderr ("*free(*double free*realloc(*double free*");
      return;
    }
  void **live = g_new0 (void *, N / KEEP_EVERY + 1);
  size_t nlive = drop_then_allocate (live);
  void *hollow = NULL;
  size_t freed = 0;
  for (size_t i = 0; i < N; i++)
    if (blocks[i])
      {
        freed++;
        if (!hollow && !page_resident (blocks[i]))
          hollow = blocks[i];
      }
  g_assert_nonnull (hollow);
  T (free) (hollow);
  g_assert_null (T (realloc) (hollow, 100));
  GHashTable *seen = g_hash_table_new (NULL, NULL);
  for (size_t i = 0; i < nlive; i++)
    g_hash_table_add (seen, live[i]);
  for (size_t i = 0; i < freed + 64; i++)
    {
      void *p = T (malloc) (SIZE);
      g_assert_nonnull (p);
      if (!g_hash_table_add (seen, p))
        g_error ("%p handed out twice after a double free of a hollow block", p);
    }
  ht_free_keys_and_destroy (seen);
  g_free (live);
}

/* A hollow block that a refill moved into a thread's bin (its page back,
 * its link written, not handed out yet) is free like any block in a bin:
 * freeing it again is reported, and it is not handed out twice. The
 * victim is a freed block whose page had gone and came back with no block
 * on that page handed out since, so only the refill wrote to it. */
static int
shares_page (const void *a, const void *b)
{
  const uintptr_t page = (uintptr_t) sysconf (_SC_PAGESIZE);
  return (uintptr_t) a / page == (uintptr_t) b / page;
}

static void
test_refilled_hollow_double_free_caught (void)
{
  if (!ht_partial_purge_or_skip (HOLLOW_SKIP))
    return;
  if (!ht_pool_bins_or_skip ("no Pool TLS box: 2 KiB blocks go from their run to the program, through no bin"))
    return;
  if (!in_process ("warn"))
    {
      g_test_trap_assert_stderr ("*free(*double free*");
      return;
    }
  void **live = g_new0 (void *, N / KEEP_EVERY + 1);
  drop_then_allocate (live);
  GPtrArray *gone = g_ptr_array_new ();
  for (size_t i = 0; i < N; i++)
    if (blocks[i] && !page_resident (blocks[i]))
      g_ptr_array_add (gone, blocks[i]);
  g_assert_cmpuint (gone->len, >, 0);
  GPtrArray *out = g_ptr_array_new ();
  void *victim = NULL;
  for (size_t n = 0; n < N && !victim; n++)
    {
      void *p = T (malloc) (SIZE);
      g_assert_nonnull (p);
      g_ptr_array_add (out, p);
      for (guint i = 0; i < gone->len && !victim; i++)
        {
          void *c = g_ptr_array_index (gone, i);
          if (!page_resident (c))
            continue;
          gboolean touched = FALSE;
          for (guint k = 0; k < out->len && !touched; k++)
            touched = shares_page (c, g_ptr_array_index (out, k));
          if (!touched)
            victim = c;
        }
    }
  g_assert_nonnull (victim);
  T (free) (victim);   /* freed already by drop_then_allocate */
  GHashTable *seen = g_hash_table_new (NULL, NULL);
  for (guint k = 0; k < out->len; k++)
    g_hash_table_add (seen, g_ptr_array_index (out, k));
  for (size_t n = 0; n < N; n++)
    {
      void *p = T (malloc) (SIZE);
      g_assert_nonnull (p);
      if (!g_hash_table_add (seen, p))
        g_error ("%p handed out twice after a second free of a refilled hollow block", p);
    }
  g_hash_table_destroy (seen);
  g_ptr_array_free (out, TRUE);
  g_ptr_array_free (gone, TRUE);
  g_free (live);
}

/* Another thread frees the live blocks of runs with hollow blocks (the
 * owner's inbox), then the owner allocates them all again. */
static void *
free_live (void *arg)
{
  void **live = arg;
  for (size_t i = 0; live[i]; i++)
    T (free) (live[i]);
  return NULL;
}

static void
test_remote_frees_into_hollow_runs (void)
{
  if (!ht_partial_purge_or_skip (HOLLOW_SKIP))
    return;
  if (!in_process (NULL))
    return;
  void **live = g_new0 (void *, N / KEEP_EVERY + 1);
  drop_then_allocate (live);
  g_assert_cmpuint (stats_hollow_blocks (), >, 0);
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, free_live, live), ==, 0);
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
  HtRange *r = g_new (HtRange, N);
  for (size_t i = 0; i < N; i++)
    {
      blocks[i] = T (malloc) (SIZE);
      g_assert_nonnull (blocks[i]);
      ht_fill (blocks[i], SIZE, i);
      r[i] = (HtRange){ (uintptr_t) blocks[i], (uintptr_t) blocks[i] + SIZE };
    }
  ht_assert_disjoint (r, N);
  for (size_t i = 0; i < N; i++)
    {
      ht_assert_pattern (blocks[i], SIZE, i);
      T (free) (blocks[i]);
    }
  g_free (r);
  g_free (live);
}

/* Random replacement at a constant live count (mid_large_mt's pattern:
 * small runs of 8-32 KiB blocks, often three quarters free) gives no page
 * back: what it frees, it takes again. */
static void
test_steady_heap_keeps_pages (void)
{
  enum { SLOTS = 1024, OPS = 200000 };
  if (!in_process (NULL))
    return;
  void *slot[SLOTS];
  uint64_t rng = 42;
  for (size_t i = 0; i < SLOTS; i++)
    slot[i] = T (malloc) (8192 + ht_rand (&rng) % (24 * 1024));
  for (size_t i = 0; i < OPS; i++)
    {
      size_t k = ht_rand (&rng) % SLOTS;
      T (free) (slot[k]);
      slot[k] = T (malloc) (8192 + ht_rand (&rng) % (24 * 1024));
      g_assert_nonnull (slot[k]);
      *(char *) slot[k] = 1;
    }
  unsigned long long hollow = stats_hollow_blocks ();
  g_test_message ("%llu blocks made hollow in %d random replacements", hollow, OPS);
  g_assert_cmpuint (hollow, ==, 0);
  for (size_t i = 0; i < SLOTS; i++)
    T (free) (slot[i]);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/hollow/drop-gives-back-free-pages", test_drop_gives_back_free_pages);
  g_test_add_func ("/hollow/whole-page-blocks", test_whole_page_blocks_hollow);
  g_test_add_func ("/hollow/double-free-caught", test_hollow_double_free_caught);
  g_test_add_func ("/hollow/refilled-block-double-free-caught", test_refilled_hollow_double_free_caught);
  g_test_add_func ("/hollow/remote-frees-into-hollow-runs", test_remote_frees_into_hollow_runs);
  g_test_add_func ("/hollow/steady-heap-keeps-pages", test_steady_heap_keeps_pages);
  g_test_add_func ("/hollow/small-growth-hollows-little", test_small_growth_hollows_little);
  g_test_add_func ("/hollow/resident-blocks-before-hollow", test_resident_blocks_before_hollow);
  g_test_add_func ("/hollow/growth-on-dirty-slabs-hollows-nothing", test_growth_on_dirty_slabs_hollows_nothing);
  return g_test_run ();
}
