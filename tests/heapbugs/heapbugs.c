/* heapbugs CASE: commits one heap bug of a class a hardened allocator is
 * run to catch (overflow, underflow, use after free, forged free-list
 * link, double free while the block waits somewhere, invalid free), then,
 * if the process is still alive, prints "survived" and ends with _exit(0)
 * (no exit handler touches the heap the bug may have damaged). Driven by
 * check.sh under every safety box and HAKMEM_ON_ERROR mode, with the
 * outcome each box must give (meson.build).
 *
 * Before the bug it prints "call: free(PTR)" (the call and block hakmem's
 * report must name) and "expect: WORDS" (what the report must say). Cases
 * that no allocator reports print a verdict line instead:
 *   read-after-free: "read: old" (the freed block still held the
 *     program's bytes) or "read: fresh" (they were overwritten);
 *   forged-link: "followed" when malloc handed out the planted address.
 *
 *   heapbugs --list        prints the case names */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ht-api.h"

/* Small: a tiny class with slack past the request in every box (300 B in
 * a 320-byte block), so an overflow of 16 bytes stays in the block's own
 * slot where nothing checks it. Large: the same past a page end. */
#define SMALL 300u
#define LARGE (300u * 1000u)
/* More freed bytes than any quarantine holds by default (128 KiB) */
#define FLUSH_BYTES (4u * 1024u * 1024u)

static inline void *
hide (void *p)
{
  __asm__ volatile ("" : "+r" (p));
  return p;
}

static void
say (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
static void
say (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  vprintf (fmt, ap);
  va_end (ap);
  fflush (stdout);
}

static void __attribute__ ((noreturn))
survived (void)
{
  say ("survived\n");
  _exit (0);
}

/* Frees FLUSH_BYTES of other blocks of p's size, so that p leaves any
 * quarantine it waits in. */
static void
push_out (size_t size)
{
  size_t n = FLUSH_BYTES / size + 1;
  void **v = A (malloc) (n * sizeof *v);
  for (size_t i = 0; i < n; i++)
    v[i] = A (malloc) (size);
  for (size_t i = 0; i < n; i++)
    A (free) (v[i]);
  A (free) (v);
}

static void
overflow (size_t size, size_t by)
{
  unsigned char *p = A (malloc) (size);
  memset (p, 1, size);
  for (size_t i = 0; i < by; i++)
    ((volatile unsigned char *) hide (p))[size + i] ^= 0xa5;
  say ("call: free(%p)\nexpect: heap overflow\n", (void *) p);
  A (free) (p);
  survived ();
}

static void
underflow (void)
{
  unsigned char *p;
  /* not the first block of a 64 KiB slab, where the bytes before it are
   * the slab's neighbour's or the SuperSlab's header */
  do
    p = A (malloc) (SMALL);
  while (!((uintptr_t) p & 0xffff));
  for (size_t i = 1; i <= 8; i++)
    ((volatile unsigned char *) hide (p))[-(ptrdiff_t) i] ^= 0xa5;
  say ("call: free(%p)\nexpect: heap underflow\n", (void *) p);
  A (free) (p);
  survived ();
}

static void
write_after_free (void)
{
  unsigned char *p = A (malloc) (SMALL);
  memset (p, 1, SMALL);
  A (free) (p);
  say ("call: free(%p)\nexpect: write after free\n", (void *) p);
  ((volatile unsigned char *) hide (p))[40] ^= 0xa5;
  push_out (SMALL);
  survived ();
}

static void
read_after_free (void)
{
  unsigned char *p = A (malloc) (SMALL);
  memset (p, 0x5a, SMALL);
  A (free) (p);
  /* bytes past the first words, which every allocator's free list uses */
  int old = 1;
  for (size_t i = 32; i < 64; i++)
    old &= ((volatile unsigned char *) hide (p))[i] == 0x5a;
  say ("read: %s\n", old ? "old" : "fresh");
  survived ();
}

/* A program's write after free plants a link in a block on a free list:
 * the address of a buffer of its own, encoded as a plain free list of
 * hakmem's encodes it (the free mark is public). */
static uint64_t planted[64] __attribute__ ((aligned (64)));

static void *
free_elsewhere (void *p)
{
  A (free) (p);
  return NULL;   /* its exit sends the block back to the heap it came from */
}

static void
forged_link (void)
{
  const uint64_t tag = (uint64_t) 0xf4ee << 48;
  planted[0] = tag;   /* "end of list", should the planted block be taken */
  unsigned char *p = A (malloc) (SMALL);
  /* freed by a thread that then exits: p goes back to this thread's heap
   * (its inbox, then its run's free list), in every box */
  pthread_t t;
  if (pthread_create (&t, NULL, free_elsewhere, p) || pthread_join (t, NULL))
    _exit (2);
  say ("call: free-list(%p)\nexpect: corrupted free-list link\n", (void *) p);
  *(volatile uint64_t *) hide (p) = (uint64_t) (uintptr_t) planted ^ tag;
  size_t n = 2 * FLUSH_BYTES / SMALL;
  for (size_t i = 0; i < n; i++)
    if (A (malloc) (SMALL) == (void *) planted)
      {
        say ("followed\n");
        _exit (0);
      }
  survived ();
}

static void
double_free_later (void)
{
  unsigned char *p = A (malloc) (SMALL);
  A (free) (p);
  /* other calls in between, of other sizes (p itself is not handed out
   * again, so the second free is the program's bug and not a new owner's
   * free) */
  for (int i = 0; i < 100; i++)
    A (free) (A (malloc) (64 + (size_t) i));
  say ("call: free(%p)\nexpect: double free\n", (void *) p);
  A (free) (p);
  survived ();
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int stage;
static void *shared;

static void *
first_freer (void *arg)
{
  (void) arg;
  /* a thread that mallocs the size keeps the blocks it frees in its bin,
   * another thread's too (one that never did sends them home) */
  A (free) (A (malloc) (SMALL));
  A (free) (shared);
  pthread_mutex_lock (&lock);
  stage = 1;
  pthread_cond_broadcast (&cond);
  while (stage != 2)   /* alive, with whatever it keeps of the block */
    pthread_cond_wait (&cond, &lock);
  pthread_mutex_unlock (&lock);
  return NULL;
}

static void
double_free_cross_thread (void)
{
  shared = A (malloc) (SMALL);
  pthread_t t;
  if (pthread_create (&t, NULL, first_freer, NULL))
    _exit (2);
  pthread_mutex_lock (&lock);
  while (stage != 1)
    pthread_cond_wait (&cond, &lock);
  pthread_mutex_unlock (&lock);
  say ("call: free(%p)\nexpect: double free\n", shared);
  A (free) (shared);
  survived ();
}

static void
invalid_free (void)
{
  unsigned char *p = A (malloc) (SMALL);
  say ("call: free(%p)\nexpect: interior pointer\n", (void *) (p + 16));
  A (free) (p + 16);
  survived ();
}

static void
unaligned_free (void)
{
  unsigned char *p = A (malloc) (SMALL);
  say ("call: free(%p)\nexpect: interior pointer\n", (void *) (p + 1));
  A (free) (p + 1);
  survived ();
}

/* An overflow that runs on past a large block: the guard page after it
 * stops it (a fault) before it reaches whatever is mapped next. */
static void
overflow_large_linear (void)
{
  unsigned char *p = A (malloc) (LARGE);
  say ("write: past a %u-byte block\n", LARGE);
  for (size_t i = 0; i < 64 * 1024; i++)
    ((volatile unsigned char *) hide (p))[LARGE + i] = 0xa5;
  say ("no fault\n");
  A (free) (p);
  survived ();
}

struct bug { const char *name; void (*run) (void); };

static void o_small_1 (void) { overflow (SMALL, 1); }
static void o_small_8 (void) { overflow (SMALL, 8); }
static void o_small_16 (void) { overflow (SMALL, 16); }
static void o_large_1 (void) { overflow (LARGE, 1); }
static void o_large_8 (void) { overflow (LARGE, 8); }
static void o_large_16 (void) { overflow (LARGE, 16); }

static const struct bug bugs[] = {
  { "overflow-small-1", o_small_1 },
  { "overflow-small-8", o_small_8 },
  { "overflow-small-16", o_small_16 },
  { "overflow-large-1", o_large_1 },
  { "overflow-large-8", o_large_8 },
  { "overflow-large-16", o_large_16 },
  { "overflow-large-linear", overflow_large_linear },
  { "underflow", underflow },
  { "write-after-free", write_after_free },
  { "read-after-free", read_after_free },
  { "forged-link", forged_link },
  { "double-free-later", double_free_later },
  { "double-free-cross-thread", double_free_cross_thread },
  { "invalid-free", invalid_free },
  { "unaligned-free", unaligned_free },
};

int
main (int argc, char **argv)
{
  if (argc != 2)
    {
      fprintf (stderr, "usage: heapbugs CASE | --list\n");
      return 2;
    }
  for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
    {
      if (!strcmp (argv[1], "--list"))
        printf ("%s\n", bugs[i].name);
      else if (!strcmp (argv[1], bugs[i].name))
        bugs[i].run ();
    }
  if (!strcmp (argv[1], "--list"))
    return 0;
  fprintf (stderr, "heapbugs: unknown case %s\n", argv[1]);
  return 2;
}
