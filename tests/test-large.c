/* The large path's cache of freed spans: what it keeps resident.
 *
 * A program that frees one large block and then asks for smaller ones
 * (GNU sort -S: a 30 MiB buffer, then 6 MiB merge buffers) must get them
 * from the memory it gave back, not keep that memory resident beside new
 * pages; a span that waits in the cache gives its pages back on the clock.
 * Resident pages are counted with mincore over the memory the blocks
 * covered (not the process's RSS, which sanitizers inflate). Each case runs
 * in a fresh process, so that no other test's spans are in the cache. */
#include "hakmem-test.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#define PAGE ((size_t) sysconf (_SC_PAGESIZE))

/* Resident pages in [lo, hi); pages no longer mapped count as not resident. */
static size_t
resident_in (uintptr_t lo, uintptr_t hi)
{
  const size_t page = PAGE;
  unsigned char vec[512];
  size_t n = 0;
  lo &= ~(uintptr_t) (page - 1);
  for (uintptr_t a = lo; a < hi;)
    {
      size_t pages = (hi - a + page - 1) / page;
      if (pages > sizeof vec)
        pages = sizeof vec;
      if (mincore ((void *) a, pages * page, vec) == 0)
        {
          for (size_t k = 0; k < pages; k++)
            n += vec[k] & 1;
          a += pages * page;
        }
      else
        {
          /* a hole somewhere in the slice: page by page */
          if (mincore ((void *) a, page, vec) == 0)
            n += vec[0] & 1;
          a += page;
        }
    }
  return n;
}

/* Resident pages in the union of the ranges (each counted once). */
static size_t
resident_in_union (HtRange *r, size_t n)
{
  qsort (r, n, sizeof *r, ht_range_cmp);
  size_t total = 0;
  uintptr_t done = 0;   /* everything below is counted */
  for (size_t i = 0; i < n; i++)
    {
      uintptr_t lo = r[i].start > done ? r[i].start : done;
      if (r[i].end > lo)
        total += resident_in (lo, r[i].end);
      if (r[i].end > done)
        done = (r[i].end + PAGE - 1) & ~(uintptr_t) (PAGE - 1);
    }
  return total;
}

/* A freed block of `big` bytes, written whole, then `n` blocks of `small`
 * bytes from calloc, written whole: they must read as zero at first, and
 * the memory all of them covered must hold no more resident pages than
 * the small blocks need (plus `slop` pages). */
static void
check_smaller_after_big (size_t big, size_t small, size_t n, size_t slop)
{
  unsigned char *a = T (malloc) (big);
  g_assert_nonnull (a);
  memset (a, 0xAA, big);
  T (free) (a);

  HtRange r[9];
  unsigned char *b[8];
  g_assert_cmpuint (n, <=, G_N_ELEMENTS (b));
  r[0].start = (uintptr_t) a;
  r[0].end = (uintptr_t) a + big;
  for (size_t i = 0; i < n; i++)
    {
      b[i] = T (calloc) (1, small);
      g_assert_nonnull (b[i]);
      if (!ht_all_bytes (b[i], small, 0))
        g_error ("calloc(1, %zu) after a freed dirty %zu-byte block is not zero", small, big);
      memset (b[i], (int) i + 1, small);
      r[i + 1].start = (uintptr_t) b[i];
      r[i + 1].end = (uintptr_t) b[i] + small;
    }
  HtRange live[8];
  memcpy (live, r + 1, n * sizeof *live);
  ht_assert_disjoint (live, n);

  size_t need = n * ((small + PAGE - 1) / PAGE);
  size_t resident = resident_in_union (r, n + 1);
  if (resident > need + slop)
    g_error ("%zu pages resident for %zu blocks of %zu bytes (%zu pages) after a freed "
             "%zu-byte block: the freed memory is kept beside them",
             resident, n, small, need, big);
  for (size_t i = 0; i < n; i++)
    {
      if (!ht_all_bytes (b[i], small, (unsigned char) (i + 1)))
        g_error ("block %zu of %zu bytes damaged", i, small);
      T (free) (b[i]);
    }
}

/* sort -S 30M: a 30 MiB buffer, then 6 MiB ones cut from it. */
static void
test_smaller_blocks_reuse_freed_span (void)
{
  if (!ht_in_process_with_decay (NULL))
    return;
  check_smaller_after_big (30 * HT_MiB, 6 * HT_MiB + 32, 5, 16);
}

/* sort -S 30M on another input: 5 MiB (+32 B) buffers. The first four
 * are cut as 6 MiB spans, with just under 1 MiB written past each block,
 * which must go back (1,276 pages stayed when it did not). The fifth
 * takes the 8 MiB rest whole (at most a quarter larger plus a chunk) and
 * keeps the 256 written pages past its end. */
static void
test_smaller_blocks_reuse_freed_span_5m (void)
{
  if (!ht_in_process_with_decay (NULL))
    return;
  check_smaller_after_big (30 * HT_MiB, 5 * HT_MiB + 32, 6, 256 + 16);
}

/* sort -S 50M: a 50 MiB buffer, then 17 MiB ones; the third does not
 * fit in what is left of it and takes that rest's pages along. */
static void
test_rest_too_small_is_grown (void)
{
  if (!ht_in_process_with_decay (NULL))
    return;
  check_smaller_after_big (50 * HT_MiB, 17 * HT_MiB - 100 * 1024, 3, 16);
}

/* Resident pages of a freed 16 MiB block (past its first page, which
 * holds the span's header) after the program kept allocating small blocks
 * for up to patience_ms. */
static size_t
freed_span_resident_after (unsigned patience_ms, unsigned char **where)
{
  const size_t size = 16 * HT_MiB;
  unsigned char *a = T (malloc) (size);
  g_assert_nonnull (a);
  memset (a, 0x5A, size);
  T (free) (a);
  *where = a;
  uintptr_t lo = (uintptr_t) a + PAGE, hi = (uintptr_t) a + size;
  size_t resident = resident_in (lo, hi);
  g_assert_cmpuint (resident, >, 0);   /* written, freed, cached */
  gint64 deadline = g_get_monotonic_time () + (gint64) patience_ms * 1000;
  while (g_get_monotonic_time () < deadline && resident)
    {
      g_usleep (5000);
      ht_keep_allocating ();
      resident = resident_in (lo, hi);
    }
  return resident;
}

static void
test_idle_span_purged_on_clock (void)
{
  if (!ht_large_cache_or_skip ("the direct large path keeps no freed block"))
    return;
  if (!ht_in_process_with_decay ("10"))
    return;
  unsigned char *a;
  size_t resident = freed_span_resident_after (10000, &a);
  if (resident)
    g_error ("%zu pages of a 16 MiB block freed 10 s ago are still resident with "
             "HAKMEM_DECAY_MS=10", resident);
  /* its pages read as zero when it comes back */
  unsigned char *b = T (calloc) (1, 16 * HT_MiB);
  g_assert_nonnull (b);
  if (!ht_all_bytes (b, 16 * HT_MiB, 0))
    g_error ("calloc after a purged span is not zero");
  T (free) (b);
}

static void
test_no_clock_keeps_span (void)
{
  if (!ht_large_cache_or_skip ("the direct large path keeps no freed block"))
    return;
  if (!ht_in_process_with_decay ("0"))
    return;
  unsigned char *a;
  size_t resident = freed_span_resident_after (500, &a);
  if (resident < 16 * HT_MiB / PAGE - 2)
    g_error ("only %zu pages of a freed 16 MiB block stay resident with HAKMEM_DECAY_MS=0 "
             "(no clock: the cache keeps them)", resident);
}

/* A program with many large blocks in use frees a few more than
 * HAKMEM_LARGE_CACHE_MB's 64 MiB of them: the cache, bounded by a quarter
 * of the bytes in use, keeps them all (their pages too, with no clock),
 * so that the program's next blocks take them instead of new pages. */
static void
test_cache_scales_with_use (void)
{
  if (!ht_large_cache_or_skip ("the direct large path keeps no freed block"))
    return;
  if (!ht_in_process_with_decay ("0"))
    return;
  enum { KEEP = 24, FREED = 6 };
  const size_t size = 16 * HT_MiB;
  unsigned char *keep[KEEP], *freed[FREED];
  for (int i = 0; i < KEEP; i++)
    {
      keep[i] = T (malloc) (size);   /* left unwritten: no resident pages */
      g_assert_nonnull (keep[i]);
    }
  HtRange r[FREED];
  for (int i = 0; i < FREED; i++)
    {
      freed[i] = T (malloc) (size);
      g_assert_nonnull (freed[i]);
      memset (freed[i], 0x3C, size);
      r[i].start = (uintptr_t) freed[i];
      r[i].end = (uintptr_t) freed[i] + size;
    }
  for (int i = 0; i < FREED; i++)
    T (free) (freed[i]);
  size_t resident = resident_in_union (r, FREED);
  size_t written = FREED * (size / PAGE);
  if (resident < written - written / 16)
    g_error ("%zu of %zu pages of %d freed 16 MiB blocks resident with %d more in use: "
             "the cache unmapped them", resident, written, FREED, KEEP);
  for (int i = 0; i < KEEP; i++)
    T (free) (keep[i]);
}

/* AddressSanitizer and valgrind's memcheck each replace glibc's malloc
 * and keep address space of their own. */
static gboolean
under_sanitizer_or_valgrind (void)
{
#if defined(__SANITIZE_ADDRESS__)
  return TRUE;
#else
  return g_getenv ("HT_UNDER_VALGRIND") != NULL;
#endif
}

/* A block above the small sizes maps the pages it reaches, not the rest of
 * its last 2 MiB chunk (backend/large.h): the page after the block's last
 * one is free for anyone to map, and a pointer into such a mapping is not
 * hakmem's. Mapping the whole chunk would cost a 270,000-byte block
 * 2 MiB of address space and commit charge. */
enum { SPAN_BLOCK = 270000 };

static void
test_block_maps_only_its_pages (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box maps a guard page after each large block"))
    return;
  if (!ht_in_process_with_decay (NULL))
    return;   /* a fresh process: no cached span, which may map more */
  const size_t page = PAGE;
  unsigned char *p = T (malloc) (SPAN_BLOCK);
  g_assert_nonnull (p);
  memset (p, 0x5C, SPAN_BLOCK);
  uintptr_t end = ((uintptr_t) p + SPAN_BLOCK + page - 1) & ~(uintptr_t) (page - 1);
  unsigned char *q = mmap ((void *) end, page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (q == MAP_FAILED)
    g_error ("the page after a %d-byte block (%p) is mapped already: %s", SPAN_BLOCK,
             (void *) end, strerror (errno));
  if (q != (unsigned char *) end)
    {
      /* a kernel older than 4.17 (or valgrind) takes the address as a hint */
      munmap (q, page);
      g_test_skip ("MAP_FIXED_NOREPLACE is not honoured here");
      T (free) (p);
      return;
    }
  memset (q, 0x11, page);
  g_assert_cmpint (hak_owns (p), ==, 1);
  g_assert_cmpint (hak_owns (q), ==, 0);
  g_assert_cmpint (hak_owns (q + 64), ==, 0);
  g_assert_true (ht_all_bytes (p, SPAN_BLOCK, 0x5C));
  T (free) (p);   /* its pages go, the mapping after them stays */
  g_assert_true (ht_all_bytes (q, page, 0x11));
  if (!under_sanitizer_or_valgrind ())   /* both replace glibc's free */
    {
      /* The page made into what glibc's free takes for one of its mmapped
       * blocks (no previous size, the page's size with the mmapped bit):
       * free hands it to glibc, which unmaps it. hakmem would have called
       * it an interior pointer of the block and aborted. */
      size_t *chunk = (size_t *) q;
      chunk[0] = 0;
      chunk[1] = page | 2;
      T (free) (q + 2 * sizeof (size_t));
      unsigned char vec;
      g_assert_cmpint (mincore (q, page, &vec), ==, -1);   /* ENOMEM: unmapped */
      return;
    }
  munmap (q, page);
}

/* The page after a block's last one, mapped by someone else and made into
 * a glibc-style mmapped chunk, asked its size by another thread again and
 * again while the block is freed and its span unmapped (no cache): the
 * answer must come from glibc every time. A span's header read as the
 * span goes away (backend/large.h, readers) would call the chunk an
 * interior pointer and abort, or crash. */
enum { RACE_ROUNDS = 20000 };
static unsigned char *_Atomic race_chunk;   /* the chunk's user pointer, or NULL between rounds */
static atomic_int race_busy, race_stop;
static atomic_ulong race_calls;

static void *
race_reader (void *arg)
{
  size_t expect = *(const size_t *) arg;
  while (!atomic_load (&race_stop))
    {
      unsigned char *q = atomic_load (&race_chunk);
      if (!q)
        {
          sched_yield ();
          continue;
        }
      /* busy, then the chunk again: the writer, which clears the chunk
       * and then waits for busy to drop, unmaps it only once no call on
       * it can be under way */
      atomic_store (&race_busy, 1);
      if (atomic_load (&race_chunk) == q)
        {
          size_t u = T (malloc_usable_size) (q);
          if (u != expect)
            g_error ("malloc_usable_size of glibc's chunk %p gave %zu, expected %zu", (void *) q, u,
                     expect);
          atomic_fetch_add (&race_calls, 1);
        }
      atomic_store (&race_busy, 0);
    }
  return NULL;
}

static void
test_foreign_chunk_while_span_goes (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box maps a guard page after each large block"))
    return;
  if (under_sanitizer_or_valgrind ())
    {
      g_test_skip ("AddressSanitizer's or memcheck's malloc_usable_size takes no glibc chunk");
      return;
    }
  g_setenv ("HAKMEM_LARGE_CACHE_MB", "0", TRUE);   /* a freed span is unmapped at once */
  if (!ht_in_process_with_decay (NULL))
    return;
  const size_t page = PAGE;
  size_t expect = page - 2 * sizeof (size_t);   /* glibc: an mmapped chunk's size less its header */
  pthread_t reader;
  g_assert_cmpint (pthread_create (&reader, NULL, race_reader, &expect), ==, 0);
  unsigned long rounds = 0;
  gint64 deadline = g_get_monotonic_time () + 3 * G_USEC_PER_SEC;
  for (int r = 0; r < RACE_ROUNDS; r++)
    {
      unsigned char *p = T (malloc) (SPAN_BLOCK);
      g_assert_nonnull (p);
      uintptr_t end = ((uintptr_t) p + SPAN_BLOCK + page - 1) & ~(uintptr_t) (page - 1);
      size_t *c = mmap ((void *) end, page, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (c == MAP_FAILED || c != (size_t *) end)
        {
          if (c != MAP_FAILED)
            munmap (c, page);
          T (free) (p);
          continue;
        }
      c[0] = 0;
      c[1] = page | 2;
      unsigned long before = atomic_load (&race_calls);
      atomic_store (&race_chunk, (unsigned char *) (c + 2));
      for (unsigned spins = 0; atomic_load (&race_calls) == before; spins++)   /* the reader is at it */
        if (spins % 1024 == 1023)
          sched_yield ();
      T (free) (p);
      atomic_store (&race_chunk, NULL);
      for (unsigned spins = 0; atomic_load (&race_busy); spins++)   /* done with the chunk */
        if (spins % 1024 == 1023)
          sched_yield ();
      munmap (c, page);
      rounds++;
      if (g_get_monotonic_time () > deadline)   /* a loaded machine: fewer rounds */
        break;
    }
  atomic_store (&race_stop, 1);
  g_assert_cmpint (pthread_join (reader, NULL), ==, 0);
  g_test_message ("%lu rounds, %lu calls", rounds, (unsigned long) atomic_load (&race_calls));
  g_assert_cmpuint (rounds, >=, 100);
}

static size_t
vm_size_bytes (void)
{
  FILE *f = fopen ("/proc/self/status", "r");
  g_assert_nonnull (f);
  char line[256];
  size_t kb = 0;
  while (fgets (line, sizeof line, f))
    if (sscanf (line, "VmSize: %zu kB", &kb) == 1)
      break;
  fclose (f);
  g_assert_cmpuint (kb, >, 0);
  return kb * 1024;
}

/* Under an address-space limit (`ulimit -v`) of 160 MiB past what the
 * process has mapped, 400 blocks of 270,000 bytes (103 MiB) all fit: with
 * a 2 MiB chunk mapped for each, the limit was reached after about 80. */
static void
test_blocks_fit_address_space_limit (void)
{
  if (under_sanitizer_or_valgrind ())
    {
      g_test_skip ("AddressSanitizer's shadow memory or valgrind's own address space is under the "
                   "same limit");
      return;
    }
  if (!ht_in_process_with_decay (NULL))
    return;
  enum { N = 400 };
  static unsigned char *b[N];
  struct rlimit lim = { vm_size_bytes () + 160 * HT_MiB, RLIM_INFINITY };
  g_assert_cmpint (setrlimit (RLIMIT_AS, &lim), ==, 0);
  for (int i = 0; i < N; i++)
    {
      b[i] = T (malloc) (SPAN_BLOCK);
      if (!b[i])
        g_error ("malloc(%d) number %d failed under an address-space limit of 160 MiB more "
                 "than the process had mapped", SPAN_BLOCK, i + 1);
      b[i][0] = (unsigned char) i;
      b[i][SPAN_BLOCK - 1] = (unsigned char) i;
    }
  for (int i = 0; i < N; i++)
    {
      g_assert_cmpint (b[i][0], ==, (unsigned char) i);
      g_assert_cmpint (b[i][SPAN_BLOCK - 1], ==, (unsigned char) i);
      T (free) (b[i]);
    }
}

/* ---- the direct large path (HAKMEM_LARGE=direct) --------------------
 * Each case runs in a fresh process with HAKMEM_LARGE=direct, whatever
 * the variant the suite runs under. */

/* TRUE in that process; in the test's own, starts it and checks that it
 * passed (or skips the test on a build without the direct path). */
static gboolean
in_direct_process (void)
{
  if (g_test_subprocess ())
    return TRUE;
  if (!HT_LARGE_DIRECT_ENABLED)
    {
      g_test_skip ("built without the direct large path (-Ddirect=off)");
      return FALSE;
    }
  /* a cache the cached path would keep the freed blocks in */
  static const char *const vars[] = { "HAKMEM_LARGE", "HAKMEM_LARGE_CACHE_MB" };
  static const char *const values[] = { "direct", "64" };
  gchar *saved[G_N_ELEMENTS (vars)];
  for (size_t i = 0; i < G_N_ELEMENTS (vars); i++)
    {
      saved[i] = g_strdup (g_getenv (vars[i]));
      g_setenv (vars[i], values[i], TRUE);
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  for (size_t i = 0; i < G_N_ELEMENTS (vars); i++)
    {
      if (saved[i])
        g_setenv (vars[i], saved[i], TRUE);
      else
        g_unsetenv (vars[i]);
      g_free (saved[i]);
    }
  g_test_trap_assert_passed ();
  return FALSE;
}

/* The first page of [lo, hi) that is still mapped, or 0 when none is
 * (mincore fails with ENOMEM on a page no mapping covers). */
static uintptr_t
first_mapped_page (uintptr_t lo, uintptr_t hi)
{
  const size_t page = PAGE;
  unsigned char vec;
  for (uintptr_t a = lo & ~(uintptr_t) (page - 1); a < hi; a += page)
    {
      if (mincore ((void *) a, page, &vec) == 0)
        return a;
      g_assert_cmpint (errno, ==, ENOMEM);
    }
  return 0;
}

/* A freed block's pages, its span's header page among them, are unmapped
 * by the free itself: no cache, no clock. */
static void
test_direct_free_unmaps (void)
{
  if (!in_direct_process ())
    return;
  static const size_t sizes[] = { 300 * 1000, 3 * HT_MiB + 5, 24 * HT_MiB };
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      size_t size = ht_opaque (sizes[i]);
      unsigned char *p = T (malloc) (size);
      g_assert_nonnull (p);
      memset (p, 0x6B, size);
      uintptr_t lo = ((uintptr_t) p - 1) & ~(uintptr_t) (PAGE - 1), hi = (uintptr_t) p + size;
      g_assert_cmpuint (first_mapped_page (lo, hi), ==, lo);
      T (free) (p);
      uintptr_t left = first_mapped_page (lo, hi);
      if (left)
        g_error ("page %#lx of a freed %zu-byte block [%p, +%zu) is still mapped",
                 (unsigned long) left, size, (void *) p, size);
    }
}

/* mallinfo2 counts the blocks in use in hblks and hblkhd, and nothing is
 * kept for reuse once they are freed: keepcost (what a trim would unmap)
 * does not grow by their bytes, as the cached path's would. */
static void
test_direct_mallinfo2_drops (void)
{
  if (!in_direct_process ())
    return;
  static const size_t sizes[] = { 270000, 600 * 1000, 2 * HT_MiB, 5 * HT_MiB + 1, 12 * HT_MiB };
  unsigned char *b[G_N_ELEMENTS (sizes)];
  size_t total = 0;
  struct mallinfo2 before = T (mallinfo2) ();
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      b[i] = T (malloc) (ht_opaque (sizes[i]));
      g_assert_nonnull (b[i]);
      memset (b[i], (int) i + 1, sizes[i]);
      total += sizes[i];
    }
  struct mallinfo2 in_use = T (mallinfo2) ();
  g_assert_cmpuint (in_use.hblks, ==, before.hblks + G_N_ELEMENTS (sizes));
  g_assert_cmpuint (in_use.hblkhd, >=, before.hblkhd + total);
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    T (free) (b[i]);
  struct mallinfo2 after = T (mallinfo2) ();
  g_assert_cmpuint (after.hblks, ==, 0);
  g_assert_cmpuint (after.hblkhd, ==, 0);
  if (after.keepcost >= before.keepcost + sizes[0])
    g_error ("keepcost grew from %zu to %zu after %zu bytes of large blocks were freed: "
             "they were kept", before.keepcost, after.keepcost, total);
}

/* realloc keeps the contents growing (in place, and moved past a page
 * mapped right after the block) and shrinking; a shrink unmaps the pages
 * past the block's new end at once. */
static void
test_direct_realloc_keeps_contents (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box maps a guard page after each large block"))
    return;
  if (!in_direct_process ())
    return;
  const size_t page = PAGE;
  size_t size = ht_opaque (400 * 1000);
  unsigned char *p = T (malloc) (size);
  g_assert_nonnull (p);
  ht_fill (p, size, 1);

  /* the page after the block taken by someone else: growing must move */
  uintptr_t end = ((uintptr_t) p + size + page - 1) & ~(uintptr_t) (page - 1);
  unsigned char *q = mmap ((void *) end, page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  g_assert_true (q != MAP_FAILED);
  if (q != (unsigned char *) end)
    {
      /* a kernel older than 4.17 (or valgrind) takes the address as a hint */
      munmap (q, page);
      q = NULL;
    }
  else
    memset (q, 0x11, page);

  static const size_t steps[] = { 900 * 1000, 3 * HT_MiB, 3 * HT_MiB + 8000, 40 * HT_MiB,
                                  5 * HT_MiB, 2 * HT_MiB - 100, 300 * 1000, 7 * HT_MiB };
  for (size_t i = 0; i < G_N_ELEMENTS (steps); i++)
    {
      size_t next = ht_opaque (steps[i]);
      size_t kept = size < next ? size : next;
      unsigned char *r = T (realloc) (p, next);
      if (!r)
        g_error ("realloc(%p, %zu) failed: %s", (void *) p, next, strerror (errno));
      if (ht_check (r, kept, i + 1) != SIZE_MAX)
        g_error ("realloc from %zu to %zu bytes lost the contents (offset %zu)", size, next,
                 ht_check (r, kept, i + 1));
      g_assert_cmpuint (T (malloc_usable_size) (r), >=, next);
      g_assert_cmpint (hak_owns (r), ==, 1);
      if (next < size)
        {
          uintptr_t past = ((uintptr_t) r + T (malloc_usable_size) (r) + page - 1) & ~(uintptr_t) (page - 1);
          uintptr_t left = first_mapped_page (past, (uintptr_t) r + size);
          if (left)
            g_error ("page %#lx past a block shrunk from %zu to %zu bytes is still mapped",
                     (unsigned long) left, size, next);
        }
      p = r;
      size = next;
      ht_fill (p, size, i + 2);
    }
  T (free) (p);
  if (q)
    {
      g_assert_true (ht_all_bytes (q, page, 0x11));
      munmap (q, page);
    }
}

/* Alignments of 4 MiB and more: the block is aligned, fully usable,
 * hakmem's, zeroed by calloc-like use of fresh pages, and gone at free. */
static void
test_direct_aligned_4m (void)
{
  if (!in_direct_process ())
    return;
  static const size_t aligns[] = { 4 * HT_MiB, 8 * HT_MiB, 64 * HT_MiB };
  for (size_t i = 0; i < G_N_ELEMENTS (aligns); i++)
    {
      size_t size = ht_opaque (5 * HT_MiB + 16 * i);
      void *v = NULL;
      g_assert_cmpint (T (posix_memalign) (&v, aligns[i], size), ==, 0);
      unsigned char *p = v;
      ht_assert_aligned (p, aligns[i]);
      g_assert_true (ht_all_bytes (p, size, 0));   /* a fresh mapping */
      g_assert_cmpuint (T (malloc_usable_size) (p), >=, size);
      g_assert_cmpint (hak_owns (p), ==, 1);
      ht_fill (p, size, i);
      unsigned char *r = T (realloc) (p, 2 * size);
      g_assert_nonnull (r);
      ht_assert_pattern (r, size, i);
      ht_assert_aligned (r, aligns[i]);
      T (free) (r);
      g_assert_cmpuint (first_mapped_page ((uintptr_t) r, (uintptr_t) r + 2 * size), ==, 0);
    }
  unsigned char *a = T (aligned_alloc) (4 * HT_MiB, 4 * HT_MiB);
  g_assert_nonnull (a);
  ht_assert_aligned (a, 4 * HT_MiB);
  memset (a, 0xEE, 4 * HT_MiB);
  T (free) (a);
  unsigned char *c = T (calloc) (1, 4 * HT_MiB);   /* likely where a was: zeros all the same */
  g_assert_nonnull (c);
  g_assert_true (ht_all_bytes (c, 4 * HT_MiB, 0));
  T (free) (c);
}

/* Minor page faults of this process so far. */
static long
minor_faults (void)
{
  struct rusage ru;
  g_assert_cmpint (getrusage (RUSAGE_SELF, &ru), ==, 0);
  return ru.ru_minflt;
}

/* Whether page faults measure the large path here: the cached box, and
 * no sanitizer or memcheck touching shadow memory. */
static gboolean
faults_measurable (void)
{
  if (!ht_large_cache_or_skip ("the direct large path keeps no freed block"))
    return FALSE;
  if (under_sanitizer_or_valgrind ())
    {
      g_test_skip ("the checker's shadow memory faults too");
      return FALSE;
    }
  return TRUE;
}

/* Whether mremap moves a range that spans several mappings (Linux 6.17
 * and later): a span pieced together by earlier moves is one such range,
 * and on an older kernel the cache cannot move it and a new block faults
 * its pages in (the allocator's answer there, not a bug). */
static gboolean
kernel_moves_many_mappings (void)
{
  struct utsname u;
  unsigned major = 0, minor = 0;
  if (uname (&u) != 0 || sscanf (u.release, "%u.%u", &major, &minor) != 2)
    return FALSE;
  return major > 6 || (major == 6 && minor >= 17);
}

/* Two freed 8 MiB blocks, all written, then a 16 MiB block that neither
 * fits: their pages move into it (mremap), so it reads as zeros from
 * calloc and faults in almost none of its 4,096 pages (all of them when
 * the cache kept the two apart). */
static void
test_freed_pages_fill_larger_block (void)
{
  if (!faults_measurable () || !ht_in_process_with_decay ("0"))
    return;
  void *a[2];
  ht_alloc_filled (a, 2, 8 * HT_MiB, 0x6B);
  T (free) (a[0]);
  T (free) (a[1]);
  long before = minor_faults ();
  unsigned char *b = T (calloc) (1, 16 * HT_MiB);
  g_assert_nonnull (b);
  g_assert_true (ht_all_bytes (b, 16 * HT_MiB, 0));
  memset (b, 0x2D, 16 * HT_MiB);
  long faults = minor_faults () - before;
  g_test_message ("%ld page faults for a 16 MiB block after two freed 8 MiB ones", faults);
  if (faults > 256)
    g_error ("a 16 MiB block faulted in %ld pages while the cache held 16 MiB of written ones",
             faults);
  T (free) (b);
}

/* A block shrunk by realloc keeps its first bytes, and the written pages
 * past its last 2 MiB chunk go to the cache: 16 MiB shrunk to 4 keeps 6,
 * and a 10 MiB block after it faults in almost none of its pages (2,560
 * when they were unmapped). */
static void
test_shrunk_tail_reused (void)
{
  if (!faults_measurable () || !ht_in_process_with_decay ("0"))
    return;
  unsigned char *a = T (malloc) (16 * HT_MiB);
  g_assert_nonnull (a);
  ht_fill (a, 16 * HT_MiB, 7);
  a = T (realloc) (a, 4 * HT_MiB);
  g_assert_nonnull (a);
  ht_assert_pattern (a, 4 * HT_MiB, 7);
  long before = minor_faults ();
  unsigned char *b = T (malloc) (10 * HT_MiB - 4096);
  g_assert_nonnull (b);
  memset (b, 0x11, 10 * HT_MiB - 4096);
  long faults = minor_faults () - before;
  g_test_message ("%ld page faults for a 10 MiB block after a 16 MiB one shrank to 4", faults);
  if (faults > 256)
    g_error ("a 10 MiB block faulted in %ld pages while 10 MiB of written ones were cached",
             faults);
  ht_assert_pattern (a, 4 * HT_MiB, 7);
  T (free) (b);
  T (free) (a);
}

/* Eight blocks of 1-8 MiB replaced at random, each written whole: the
 * program faults in about as many pages as its blocks needed at their
 * peak (14,053 for 13,972), not a new block's worth each time (30,009
 * when the cache kept its spans apart), and the blocks in use and the
 * cache together stay within that peak and the few pages the cache
 * cannot move. */
static void
test_churn_faults_bounded_by_peak (void)
{
  if (!faults_measurable ())
    return;
  if (!kernel_moves_many_mappings ())
    {
      g_test_skip ("mremap moves a range over several mappings from Linux 6.17 on");
      return;
    }
  if (!ht_in_process_with_decay ("0"))
    return;
  enum { SLOTS = 8, STEPS = 300 };
  unsigned char *slot[SLOTS];
  size_t peak = 0, foot_max = 0;
  GRand *rng = g_rand_new_with_seed (35);
  long before = minor_faults ();
  for (int i = 0; i < SLOTS; i++)
    {
      size_t size = (size_t) g_rand_int_range (rng, 1 << 20, 8 << 20);
      slot[i] = T (malloc) (size);
      g_assert_nonnull (slot[i]);
      memset (slot[i], i, size);
    }
  for (int k = 0; k < STEPS; k++)
    {
      int i = g_rand_int_range (rng, 0, SLOTS);
      size_t size = (size_t) g_rand_int_range (rng, 1 << 20, 8 << 20);
      struct hak_stats s = ht_stats ();
      if (s.large_live_bytes > peak)
        peak = s.large_live_bytes;
      T (free) (slot[i]);
      slot[i] = T (malloc) (size);
      g_assert_nonnull (slot[i]);
      memset (slot[i], k, size);
      s = ht_stats ();
      if (s.large_live_bytes > peak)
        peak = s.large_live_bytes;
      if (s.large_live_bytes + s.large_cached_bytes > foot_max)
        foot_max = s.large_live_bytes + s.large_cached_bytes;
    }
  long faults = minor_faults () - before;
  size_t peak_pages = peak / PAGE;
  g_test_message ("%ld page faults, a peak of %zu pages in use, footprint at most %zu KiB "
                  "against a peak of %zu KiB in use", faults, peak_pages, foot_max >> 10,
                  peak >> 10);
  if ((size_t) faults > peak_pages + peak_pages / 4 + 512)
    g_error ("%ld page faults for blocks that needed %zu pages at most at once", faults,
             peak_pages);
  if (foot_max > peak + peak / 8)
    g_error ("blocks in use and cached reached %zu KiB, their peak in use %zu KiB",
             foot_max >> 10, peak >> 10);
  g_rand_free (rng);
  for (int i = 0; i < SLOTS; i++)
    T (free) (slot[i]);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/large/smaller-blocks-reuse-freed-span", test_smaller_blocks_reuse_freed_span);
  g_test_add_func ("/large/smaller-blocks-reuse-freed-span-5m", test_smaller_blocks_reuse_freed_span_5m);
  g_test_add_func ("/large/rest-too-small-is-grown", test_rest_too_small_is_grown);
  g_test_add_func ("/large/idle-span-purged-on-clock", test_idle_span_purged_on_clock);
  g_test_add_func ("/large/no-clock-keeps-span", test_no_clock_keeps_span);
  g_test_add_func ("/large/cache-scales-with-use", test_cache_scales_with_use);
  g_test_add_func ("/large/freed-pages-fill-larger-block", test_freed_pages_fill_larger_block);
  g_test_add_func ("/large/shrunk-tail-reused", test_shrunk_tail_reused);
  g_test_add_func ("/large/churn-faults-bounded-by-peak", test_churn_faults_bounded_by_peak);
  g_test_add_func ("/large/block-maps-only-its-pages", test_block_maps_only_its_pages);
  g_test_add_func ("/large/blocks-fit-address-space-limit", test_blocks_fit_address_space_limit);
  g_test_add_func ("/large/foreign-chunk-while-span-goes", test_foreign_chunk_while_span_goes);
  g_test_add_func ("/large/direct/free-unmaps", test_direct_free_unmaps);
  g_test_add_func ("/large/direct/mallinfo2-drops", test_direct_mallinfo2_drops);
  g_test_add_func ("/large/direct/realloc-keeps-contents", test_direct_realloc_keeps_contents);
  g_test_add_func ("/large/direct/aligned-4m", test_direct_aligned_4m);
  return g_test_run ();
}
