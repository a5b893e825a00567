/* badfree CASE: performs exactly one bad allocator call (free, realloc or
 * malloc_usable_size of a pointer that is not a live hakmem block), then,
 * if the process is still alive, checks that the call had no effect, prints
 * "survived" and exits 0. Driven by check.sh under every safety box and
 * HAKMEM_ON_ERROR mode.
 *
 * Before the bad call it prints "call: NAME(PTR)" on stdout (PTR as %p) and
 * "expect: WORDS" (the reason the report must give), so the driver can match
 * hakmem's report line exactly.
 *
 * "No effect" is checked after the call: the victim block (if any) still
 * holds its pattern, later allocations never hand out the same block twice
 * or an address inside a live block, a stack or static buffer passed in is
 * unchanged (a free that pushed it on a free list would write a link into
 * it). With HAKMEM_ON_ERROR=warn or ignore, realloc must return NULL (warn:
 * errno EINVAL) and malloc_usable_size 0.
 *
 *   badfree --list        prints the case names */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../ht-api.h"

static inline void *
hide (void *p)
{
  __asm__ volatile ("" : "+r" (p));
  return p;
}

static void __attribute__ ((noreturn, format (printf, 1, 2)))
fail (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  fputs ("badfree: FAIL: ", stdout);
  vfprintf (stdout, fmt, ap);
  fputc ('\n', stdout);
  va_end (ap);
  fflush (stdout);
  _exit (3);
}

static void
fill (unsigned char *p, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char) (seed + i * 7 + (i >> 8));
}

static int
intact (const unsigned char *p, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char) (seed + i * 7 + (i >> 8)))
      return 0;
  return 1;
}

enum call { C_FREE, C_REALLOC, C_USABLE, C_FREE_SIZED, C_FREE_ALIGNED_SIZED };
static const char *const call_name[] = { "free", "realloc", "malloc_usable_size", "free_sized",
                                         "free_aligned_sized" };
/* the size and alignment the sized calls pass */
static size_t sized_size, sized_align;

static unsigned char static_buf[256] __attribute__ ((aligned (64)));

/* The one bad call. Returns normally only if hakmem did not abort. */
static void
bad_call (enum call c, void *p, const char *reason)
{
  printf ("call: %s(%p)\nexpect: %s\n", call_name[c], p, reason);
  fflush (stdout);
  const char *mode = getenv ("HAKMEM_ON_ERROR");
  int warn = mode && !strcmp (mode, "warn");
  switch (c)
    {
    case C_FREE:
      A (free) (hide (p));
      break;
    case C_REALLOC:
      {
        errno = 0;
        void *q = A (realloc) (hide (p), 100);
        int e = errno;
        if (q != NULL)
          fail ("realloc(%p, 100) of a bad pointer returned %p, expected NULL", p, q);
        if (warn && e != EINVAL)
          fail ("realloc(%p, 100) of a bad pointer: errno %d (%s), expected EINVAL", p, e,
                strerror (e));
        break;
      }
    case C_USABLE:
      {
        size_t u = A (malloc_usable_size) (hide (p));
        if (u != 0)
          fail ("malloc_usable_size(%p) of a bad pointer returned %zu, expected 0", p, u);
        break;
      }
    case C_FREE_SIZED:
      A (free_sized) (hide (p), sized_size);
      break;
    case C_FREE_ALIGNED_SIZED:
      A (free_aligned_sized) (hide (p), sized_align, sized_size);
      break;
    }
}

/* Allocate many blocks of `size`: none may be handed out twice, none may
 * overlap [lo, hi). Then free them. */
static void
no_duplicates (size_t size, const void *lo, const void *hi)
{
  enum { N = 200 };
  unsigned char *b[N];
  for (int i = 0; i < N; i++)
    {
      b[i] = A (malloc) (size);
      if (!b[i])
        fail ("malloc(%zu) returned NULL after the bad call", size);
      if (lo && (uintptr_t) b[i] < (uintptr_t) hi && (uintptr_t) b[i] + size > (uintptr_t) lo)
        fail ("malloc(%zu) returned %p, inside the memory of the bad call [%p, %p)", size,
              (void *) b[i], lo, hi);
      for (int j = 0; j < i; j++)
        if (b[j] == b[i])
          fail ("malloc(%zu) returned %p twice after the bad call", size, (void *) b[i]);
      fill (b[i], size < 64 ? size : 64, (unsigned) i);
    }
  for (int i = 0; i < N; i++)
    {
      if (!intact (b[i], size < 64 ? size : 64, (unsigned) i))
        fail ("block %p damaged after the bad call", (void *) b[i]);
      A (free) (b[i]);
    }
}

/* ---- cases ------------------------------------------------------------- */

/* free(p) then a bad call on p; `later`: other frees of the same size in
 * between (so p is no longer at the head of a free list). */
static void
double_free (enum call c, size_t size, int later)
{
  unsigned char *p = A (malloc) (size);
  unsigned char *others[8];
  for (int i = 0; i < 8; i++)
    others[i] = A (malloc) (size);
  if (!p)
    fail ("malloc(%zu)", size);
  A (free) (p);
  if (later)
    for (int i = 0; i < 8; i++)
      {
        A (free) (others[i]);
        others[i] = NULL;
      }
  bad_call (c, p, "double free");
  for (int i = 0; i < 8; i++)
    if (others[i])
      A (free) (others[i]);
  no_duplicates (size, NULL, NULL);
}

/* A block freed by a thread that has since exited, then the bad call on
 * it from a new thread, as that thread's first allocator call: the block
 * waits free in the exited thread's heap for whichever thread adopts it,
 * and the new thread, with no heap of its own yet, once took the call for
 * a good free (then adopted the heap and handed the block out twice). */
struct exited_case
{
  enum call c;
  size_t size;
  unsigned char *p;
};

static void *
alloc_free_and_exit (void *arg)
{
  struct exited_case *e = arg;
  e->p = A (malloc) (e->size);
  if (!e->p)
    fail ("malloc(%zu)", e->size);
  A (free) (e->p);
  return NULL;
}

static void *
bad_call_first (void *arg)
{
  struct exited_case *e = arg;
  bad_call (e->c, e->p, "double free");
  no_duplicates (e->size, NULL, NULL);
  return NULL;
}

static void
run_in_thread (void *(*fn) (void *), void *arg)
{
  pthread_t t;
  if (pthread_create (&t, NULL, fn, arg) || pthread_join (t, NULL))
    fail ("pthread_create or pthread_join failed");
}

static void
double_free_exited (enum call c, size_t size)
{
  struct exited_case e = { c, size, NULL };
  run_in_thread (alloc_free_and_exit, &e);
  run_in_thread (bad_call_first, &e);
  no_duplicates (size, NULL, NULL);
}

static void
interior (enum call c, size_t size, size_t off)
{
  unsigned char *p = A (malloc) (size);
  if (!p)
    fail ("malloc(%zu)", size);
  fill (p, size, 11);
  bad_call (c, p + off, "interior pointer");
  if (!intact (p, size, 11))
    fail ("the %zu-byte block %p was changed by the bad call on %p", size, (void *) p,
          (void *) (p + off));
  if (A (malloc_usable_size) (p) < size)
    fail ("the block %p is no longer live after the bad call on an interior pointer", (void *) p);
  no_duplicates (size < 4 * KiB ? size : 64, p, p + size);
  if (!intact (p, size, 11))
    fail ("the %zu-byte block %p was handed out again after the bad call", size, (void *) p);
  A (free) (p);
}

/* The address just past the last block that fits in p's 64 KiB slab: a
 * multiple of the block size from the slab boundary, still inside the slab
 * when the size does not divide 64 KiB, where a block would start if it
 * fitted. It was never a block: accepting it would hand out memory that
 * runs into the next slab. */
static void
slab_tail (enum call c, size_t size)
{
  unsigned char *p = A (malloc) (size);
  if (!p)
    fail ("malloc(%zu)", size);
  fill (p, size, 13);
  uintptr_t slab = (uintptr_t) p & ~(uintptr_t) 0xFFFF;
  unsigned char *tail = (unsigned char *) (slab + (0x10000 / size) * size);
  bad_call (c, tail, "interior pointer");
  if (!intact (p, size, 13))
    fail ("the %zu-byte block %p was changed by the bad call on %p", size, (void *) p,
          (void *) tail);
  /* no block may cover the tail's first byte (the next slab's first
   * block may well start within tail + size) */
  no_duplicates (size, tail, tail + 1);
  A (free) (p);
}

/* The page just past the last block of p's run, for blocks of whole pages
 * laid end to end (backend/superslab.h, hak_size_page_starts): 28 KiB
 * blocks, nine in a run of four slabs, whose last page holds none. Its
 * address is a multiple of the block size from the run's start, where a
 * tenth block would start if it fitted, and a page start, which the hit
 * path's check of such a class accepts: the page's tag must send it to
 * the slow path. The run is the class's first, every block of it handed
 * out (carved whole, its pages all tagged). */
static void
run_tail_page (enum call c, size_t size)
{
  enum { BLOCKS = 4 * 0x10000 / (28 * KiB) };
  unsigned char *b[BLOCKS];
  for (size_t k = 0; k < BLOCKS; k++)
    {
      if (!(b[k] = A (malloc) (size)))
        fail ("malloc(%zu)", size);
      if (b[k] != b[0] + k * size)
        fail ("the %zu-byte blocks %p and %p are not laid end to end", size, (void *) b[0], (void *) b[k]);
      fill (b[k], 64, 19);
    }
  if ((uintptr_t) b[0] & 0xFFFF)
    fail ("the first %zu-byte block %p does not start a run", size, (void *) b[0]);
  unsigned char *tail = b[0] + BLOCKS * size;
  bad_call (c, tail, "interior pointer");
  for (size_t k = 0; k < BLOCKS; k++)
    if (!intact (b[k], 64, 19))
      fail ("the %zu-byte block %p was changed by the bad call on %p", size, (void *) b[k], (void *) tail);
  no_duplicates (size, tail, tail + 1);
  for (size_t k = 0; k < BLOCKS; k++)
    A (free) (b[k]);
}

/* A block start of p's run that the run has not carved yet (handed out to
 * nobody): `ahead` blocks past p, p being among the first blocks of its
 * class's fresh run. Its free was once taken, and the block handed out
 * twice (once from the bin the free put it in, once when carving reached
 * it): no_duplicates allocates far enough for carving to get there. */
static void
uncarved (enum call c, size_t size, size_t ahead)
{
  unsigned char *p = A (malloc) (size);
  if (!p)
    fail ("malloc(%zu)", size);
  fill (p, size < 4096 ? size : 4096, 17);
  bad_call (c, p + ahead * size, "not a live block");
  if (!intact (p, size < 4096 ? size : 4096, 17))
    fail ("the %zu-byte block %p was changed by the bad call", size, (void *) p);
  no_duplicates (size, NULL, NULL);
  A (free) (p);
}

/* free_sized / free_aligned_sized of a live block with a size (or
 * alignment) it cannot have been asked with: reported, and the block
 * stays live. */
static void
wrong_size (enum call c, size_t size, size_t claimed, size_t align)
{
  unsigned char *p = A (malloc) (size);
  unsigned char *spare = NULL;
  if (!p)
    fail ("malloc(%zu)", size);
  int bad_align = align > 16;   /* else every block has it: the size is wrong */
  if (bad_align && ((uintptr_t) p & (align - 1)) == 0)
    {
      spare = p;   /* aligned by chance: the next one is not */
      p = A (malloc) (size);
    }
  fill (p, size < 4096 ? size : 4096, 19);
  sized_size = claimed;
  sized_align = align;
  char reason[64];
  if (bad_align)
    snprintf (reason, sizeof reason, "alignment %zu does not match the block", align);
  else
    snprintf (reason, sizeof reason, "size %zu does not match the block", claimed);
  bad_call (c, p, reason);
  if (!intact (p, size < 4096 ? size : 4096, 19))
    fail ("the %zu-byte block %p was changed by the bad call", size, (void *) p);
  if (A (malloc_usable_size) (p) < size)
    fail ("the block %p is no longer live after the bad call", (void *) p);
  no_duplicates (size < 64 * KiB ? size : 64, p, p + size);
  A (free) (p);
  if (spare)
    A (free) (spare);
}

static void
foreign_buffer (enum call c, unsigned char *buf, size_t n)
{
  fill (buf, n, 5);
  bad_call (c, buf + 64, "not allocated by hakmem");
  if (!intact (buf, n, 5))
    fail ("the buffer at %p was written by the bad call", (void *) buf);
  no_duplicates (32, buf, buf + n);
  no_duplicates (48, buf, buf + n);
  if (!intact (buf, n, 5))
    fail ("the buffer at %p was written after the bad call", (void *) buf);
}

static void
stack_case (enum call c)
{
  unsigned char buf[512] __attribute__ ((aligned (64)));
  foreign_buffer (c, buf, sizeof buf);
}

static void
static_case (enum call c)
{
  foreign_buffer (c, static_buf, sizeof static_buf);
}

static void
garbage_case (enum call c)
{
  bad_call (c, (void *) (uintptr_t) 0x1000, "not allocated by hakmem");
  no_duplicates (32, NULL, NULL);
}

static void
mmap_case (enum call c)
{
  size_t len = 256 * KiB;
  unsigned char *m = mmap (NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    fail ("mmap: %s", strerror (errno));
  fill (m, len, 9);
  bad_call (c, m + 0x1010, "not allocated by hakmem");
  if (!intact (m, len, 9))
    fail ("the mapping at %p was written by the bad call", (void *) m);
  no_duplicates (64, m, m + len);
  munmap (m, len);
}

struct tcase
{
  const char *name;
  void (*fn) (enum call, size_t, size_t);
  size_t a, b;
};

static void
run_double (enum call c, size_t size, size_t later)
{
  double_free (c, size, (int) later);
}
static void
run_double_exited (enum call c, size_t size, size_t unused)
{
  (void) unused;
  double_free_exited (c, size);
}
static void
run_interior (enum call c, size_t size, size_t off)
{
  interior (c, size, off);
}
static void
run_slab_tail (enum call c, size_t size, size_t unused)
{
  (void) unused;
  slab_tail (c, size);
}
static void
run_run_tail_page (enum call c, size_t size, size_t unused)
{
  (void) unused;
  run_tail_page (c, size);
}
static void
run_uncarved (enum call c, size_t size, size_t ahead)
{
  uncarved (c, size, ahead);
}
static void
run_stack (enum call c, size_t a, size_t b)
{
  (void) a, (void) b;
  stack_case (c);
}
static void
run_static (enum call c, size_t a, size_t b)
{
  (void) a, (void) b;
  static_case (c);
}
static void
run_garbage (enum call c, size_t a, size_t b)
{
  (void) a, (void) b;
  garbage_case (c);
}
static void
run_mmap (enum call c, size_t a, size_t b)
{
  (void) a, (void) b;
  mmap_case (c);
}

/* Base cases; each exists as a free case (NAME), a realloc case
 * (realloc-NAME) and, for pointers that were never blocks, a
 * malloc_usable_size case (usable-NAME). */
static const struct tcase cases[] = {
  { "double-tiny", run_double, 32, 0 },
  { "double-mid", run_double, 8 * KiB, 0 },
  { "double-large", run_double, MiB, 0 },
  { "double-tiny-later", run_double, 32, 1 },
  { "double-mid-later", run_double, 8 * KiB, 1 },
  { "double-large-later", run_double, MiB, 1 },
  { "double-tiny-exited", run_double_exited, 32, 0 },
  { "double-mid-exited", run_double_exited, 8 * KiB, 0 },
  { "interior-tiny+16", run_interior, 64, 16 },
  { "interior-tiny+8", run_interior, 64, 8 },
  { "interior-mid+16", run_interior, 8 * KiB, 16 },
  { "interior-mid+8", run_interior, 8 * KiB, 8 },
  { "interior-large+4096", run_interior, MiB, 4096 },
  { "interior-page+4096", run_interior, 24 * KiB, 4096 },
  { "slab-tail-tiny", run_slab_tail, 48, 0 },
  { "slab-tail-mid", run_slab_tail, 18 * KiB, 0 },
  { "run-tail-page", run_run_tail_page, 28 * KiB, 0 },
  { "uncarved-tiny", run_uncarved, 48, 120 },
  { "uncarved-mid", run_uncarved, 24 * KiB, 1 },
  { "uncarved-big", run_uncarved, 96 * KiB, 1 },
  { "stack", run_stack, 0, 0 },
  { "static", run_static, 0, 0 },
  { "garbage", run_garbage, 0, 0 },
  { "mmap", run_mmap, 0, 0 },
};
#define NCASES (sizeof cases / sizeof cases[0])

/* Cases of the sized frees: name, call, block size, size claimed,
 * alignment claimed (free_aligned_sized). */
static const struct scase
{
  const char *name;
  enum call c;
  size_t size, claimed, align;
} sized_cases[] = {
  { "sized-tiny-over", C_FREE_SIZED, 32, 1000, 0 },
  { "sized-mid-over", C_FREE_SIZED, 8 * KiB, 9 * KiB, 0 },
  { "sized-large-over", C_FREE_SIZED, MiB, 2 * MiB, 0 },
  { "aligned-sized-size", C_FREE_ALIGNED_SIZED, 100, 4096, 16 },
  { "aligned-sized-align", C_FREE_ALIGNED_SIZED, 64, 64, 4096 },
};

static int
usable_applies (const struct tcase *t)
{
  /* a freed small block may still look live to malloc_usable_size (see
   * hak_owns in hakmem.h): only never-a-block pointers */
  return strncmp (t->name, "double-", 7) != 0;
}

int
main (int argc, char **argv)
{
  if (argc != 2)
    {
      fprintf (stderr, "usage: badfree CASE | --list\n");
      return 2;
    }
  for (size_t i = 0; i < sizeof sized_cases / sizeof sized_cases[0]; i++)
    {
      const struct scase *t = &sized_cases[i];
      if (!strcmp (argv[1], "--list"))
        {
          puts (t->name);
          continue;
        }
      if (strcmp (argv[1], t->name))
        continue;
      A (free) (A (malloc) (16));
      static char out_buf2[BUFSIZ];
      setvbuf (stdout, out_buf2, _IOLBF, sizeof out_buf2);
      wrong_size (t->c, t->size, t->claimed, t->align);
      puts ("survived");
      fflush (stdout);
      return 0;
    }
  for (size_t i = 0; i < NCASES; i++)
    {
      if (!strcmp (argv[1], "--list"))
        {
          printf ("%s\nrealloc-%s\n", cases[i].name, cases[i].name);
          if (usable_applies (&cases[i]))
            printf ("usable-%s\n", cases[i].name);
          continue;
        }
      const char *name = argv[1];
      enum call c = C_FREE;
      if (!strncmp (name, "realloc-", 8))
        c = C_REALLOC, name += 8;
      else if (!strncmp (name, "usable-", 7))
        c = C_USABLE, name += 7;
      if (strcmp (name, cases[i].name))
        continue;
      if (c == C_USABLE && !usable_applies (&cases[i]))
        break;
      /* hakmem initialised before the case */
      A (free) (A (malloc) (16));
      /* stdout's buffer would otherwise come from malloc at the case's first
       * printf, and could take the memory of a block the case has just
       * freed (a run given back and reused whole): the double-free cases
       * need that memory to stay free until the second free */
      static char out_buf[BUFSIZ];
      setvbuf (stdout, out_buf, _IOLBF, sizeof out_buf);
      cases[i].fn (c, cases[i].a, cases[i].b);
      puts ("survived");
      fflush (stdout);
      return 0;
    }
  if (!strcmp (argv[1], "--list"))
    return 0;
  fprintf (stderr, "badfree: unknown case %s\n", argv[1]);
  return 2;
}
