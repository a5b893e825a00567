/* Fuzz harness: input bytes -> a sequence of allocator calls on a table of
 * 64 slots, checked against a shadow model of every live block.
 *
 * Each operation reads an opcode byte, a slot byte and, as needed, size,
 * alignment and content bytes from the input. The shadow model keeps, per
 * slot, the pointer, the requested size and the content seed (a byte taken
 * from the input); every block is filled from its seed when it is obtained
 * and verified completely before it is freed or reallocated (realloc: the
 * kept prefix). Also checked: calloc returns zeros, usable size >= requested
 * size, the requested alignment, no two live blocks overlap, failed calls
 * (only for absurd sizes) return NULL with ENOMEM. Any mismatch aborts.
 *
 * Entry points, one source:
 *   LLVMFuzzerTestOneInput  for libFuzzer (target fuzz-libfuzzer, clang only)
 *   main (unless FUZZ_NO_MAIN): the standalone driver
 *     fuzz-driver FILE...               replay inputs (corpus, crash files; - = stdin)
 *     fuzz-driver --random N [--seed S] [--max-len L]
 *                                       run N pseudo-random inputs
 * See README.md in this directory for long campaigns. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ht-api.h"

enum { NSLOTS = 64 };
/* Bound on the bytes live at once, so one input cannot take the machine. */
static const size_t LIVE_LIMIT = 96 * MiB;

struct slot
{
  unsigned char *p;
  size_t size;          /* requested size */
  unsigned char seed;   /* content seed from the input */
};

static struct slot slots[NSLOTS];
static size_t live_bytes;
static uint64_t n_ops;

/* ---- input reader ------------------------------------------------------ */

struct in
{
  const uint8_t *d;
  size_t n, i;
};

static unsigned
byte (struct in *in)
{
  return in->i < in->n ? in->d[in->i++] : 0;
}

static unsigned
u16 (struct in *in)
{
  unsigned lo = byte (in);
  return lo | (byte (in) << 8);
}

/* Size from the input: tiny mostly, then mid, large, and a few edge sizes. */
static size_t
get_size (struct in *in)
{
  unsigned sel = byte (in);
  unsigned v = u16 (in);
  /* mid and large sizes are skewed towards the low end (v*v): the byte
   * traffic of filling and checking blocks is what bounds executions/s */
  uint64_t sq = (uint64_t) v * v;
  if (sel < 160)
    return v % 1041;                                  /* tiny: 0 .. 1040 */
  if (sel < 220)
    return 1041 + (size_t) (sq >> 14) % (256 * KiB - 1040);   /* mid */
  if (sel < 232)
    return 256 * KiB + 1 + (size_t) (sq >> 12);       /* large: 256 KiB .. ~1.3 MiB */
  /* edges around class and range boundaries */
  static const size_t edge[] = {
    1, 8, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1023, 1024, 1025, 1039, 1040, 1041, 4095, 4096, 4097,
    65535, 65536, 65537, 256 * KiB - 1, 256 * KiB, 256 * KiB + 1, 2 * MiB - 1, 2 * MiB,
    2 * MiB + 1, 4 * MiB,
  };
  return edge[v % (sizeof edge / sizeof edge[0])];
}

static size_t
get_align (struct in *in)
{
  return (size_t) 1 << (3 + byte (in) % 18);   /* 8 .. 1 MiB */
}

/* ---- shadow model ------------------------------------------------------ */

static void __attribute__ ((noreturn, format (printf, 1, 2)))
bug (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  fprintf (stderr, "fuzz: BUG after %" PRIu64 " ops: ", n_ops);
  vfprintf (stderr, fmt, ap);
  fputc ('\n', stderr);
  va_end (ap);
  abort ();
}

/* Content of a block: 8-byte words that depend on the seed and the offset,
 * so every byte changes along the block and two seeds differ everywhere. */
static inline uint64_t
content_word (unsigned char seed, size_t i)
{
  uint64_t w = (uint64_t) seed * 0x0101010101010101ull;
  return w ^ ((uint64_t) (i + 1) * 0x9E3779B97F4A7C15ull);
}

static inline unsigned char
content (unsigned char seed, size_t i)
{
  uint64_t w = content_word (seed, i & ~(size_t) 7);
  return (unsigned char) (w >> ((i & 7) * 8));
}

static void
fill (struct slot *s)
{
  size_t i = 0;
  for (; i + 8 <= s->size; i += 8)
    {
      uint64_t w = content_word (s->seed, i);
      memcpy (s->p + i, &w, 8);
    }
  for (; i < s->size; i++)
    s->p[i] = content (s->seed, i);
}

static void
verify (const struct slot *s, size_t n, const char *when)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    {
      uint64_t w;
      memcpy (&w, s->p + i, 8);
      if (w != content_word (s->seed, i))
        break;
    }
  for (; i < n; i++)
    if (s->p[i] != content (s->seed, i))
      bug ("block %p (%zu bytes, seed %u) damaged at offset %zu before %s: %#x, expected %#x",
           (void *) s->p, s->size, s->seed, i, when, s->p[i], content (s->seed, i));
}

/* A fresh block: alignment, usable size, no overlap with any live block. */
static void
accept (int k, void *p, size_t size, size_t align, unsigned char seed, const char *how)
{
  if (((uintptr_t) p & (align - 1)) != 0)
    bug ("%s(%zu, align %zu) returned %p: misaligned", how, size, align, p);
  size_t usable = A (malloc_usable_size) (p);
  if (usable < size)
    bug ("%s(%zu): malloc_usable_size(%p) = %zu", how, size, p, usable);
  uintptr_t a = (uintptr_t) p, e = a + (size ? size : 1);
  for (int j = 0; j < NSLOTS; j++)
    {
      if (j == k || !slots[j].p)
        continue;
      uintptr_t b = (uintptr_t) slots[j].p, f = b + (slots[j].size ? slots[j].size : 1);
      if (a < f && b < e)
        bug ("%s(%zu) returned %p, overlapping live block %p (%zu bytes)", how, size, p,
             (void *) slots[j].p, slots[j].size);
    }
  slots[k].p = p;
  slots[k].size = size;
  slots[k].seed = seed;
  live_bytes += size;
  fill (&slots[k]);
}

static void
release (int k, const char *why)
{
  struct slot *s = &slots[k];
  verify (s, s->size, why);
  A (free) (s->p);
  live_bytes -= s->size;
  s->p = NULL;
}

static void
expect_enomem (void *p, const char *what)
{
  if (p)
    bug ("%s returned %p for an absurd size", what, p);
  if (errno != ENOMEM)
    bug ("%s: errno %d, expected ENOMEM", what, errno);
}

static void
run_input (const uint8_t *data, size_t size)
{
  struct in in = { data, size, 0 };

  while (in.i < in.n)
    {
      unsigned op = byte (&in) % 12;
      int k = (int) (byte (&in) % NSLOTS);
      struct slot *s = &slots[k];
      n_ops++;
      switch (op)
        {
        case 0: /* malloc */
        case 1:
          {
            size_t n = get_size (&in);
            if (live_bytes + n > LIVE_LIMIT)
              break;
            if (s->p)
              release (k, "free (slot reuse)");
            void *p = A (malloc) (n);
            if (!p)
              bug ("malloc(%zu) returned NULL", n);
            accept (k, p, n, 16, (unsigned char) byte (&in), "malloc");
            break;
          }
        case 2: /* calloc */
          {
            size_t n = get_size (&in);
            size_t m = 1 + byte (&in) % 8;
            n = n / m;
            if (live_bytes + n * m > LIVE_LIMIT)
              break;
            if (s->p)
              release (k, "free (slot reuse)");
            unsigned char *p = A (calloc) (m, n);
            if (!p)
              bug ("calloc(%zu, %zu) returned NULL", m, n);
            for (size_t i = 0; i < n * m; i++)
              if (p[i])
                bug ("calloc(%zu, %zu) = %p not zero at offset %zu", m, n, (void *) p, i);
            accept (k, p, n * m, 16, (unsigned char) byte (&in), "calloc");
            break;
          }
        case 3: /* realloc */
        case 4:
          {
            size_t n = get_size (&in);
            if (live_bytes + n > LIVE_LIMIT)
              break;
            unsigned char seed = (unsigned char) byte (&in);
            if (!s->p)
              {
                void *p = A (realloc) (NULL, n);
                if (!p)
                  bug ("realloc(NULL, %zu) returned NULL", n);
                accept (k, p, n, 16, seed, "realloc(NULL)");
                break;
              }
            verify (s, s->size, "realloc");
            if (n == 0)
              {
                /* hakmem follows glibc: frees and returns NULL */
                void *q = A (realloc) (s->p, 0);
                live_bytes -= s->size;
                if (q)
                  {
                    s->p = NULL;
                    accept (k, q, 0, 16, seed, "realloc(p, 0)");
                  }
                else
                  s->p = NULL;
                break;
              }
            unsigned char *q = A (realloc) (s->p, n);
            if (!q)
              bug ("realloc(%zu -> %zu) returned NULL", s->size, n);
            struct slot old = *s;
            old.p = q;
            verify (&old, n < s->size ? n : s->size, "use after realloc (prefix)");
            live_bytes -= s->size;
            s->p = NULL;
            accept (k, q, n, 16, seed, "realloc");
            break;
          }
        case 5: /* free */
        case 6:
          if (s->p)
            release (k, "free");
          break;
        case 7: /* aligned_alloc */
        case 8: /* posix_memalign */
        case 9: /* memalign */
          {
            size_t n = get_size (&in);
            size_t al = get_align (&in);
            if (op == 7)
              n = (n + al - 1) & ~(al - 1);
            if (live_bytes + n + al > LIVE_LIMIT)
              break;
            if (s->p)
              release (k, "free (slot reuse)");
            void *p = NULL;
            const char *how;
            if (op == 7)
              {
                p = A (aligned_alloc) (al, n);
                how = "aligned_alloc";
              }
            else if (op == 8)
              {
                if (al < sizeof (void *))
                  al = sizeof (void *);
                int rc = A (posix_memalign) (&p, al, n);
                if (rc != 0)
                  bug ("posix_memalign(%zu, %zu) returned %d", al, n, rc);
                how = "posix_memalign";
              }
            else
              {
                p = A (memalign) (al, n);
                how = "memalign";
              }
            if (!p)
              bug ("%s(%zu, %zu) returned NULL", how, al, n);
            accept (k, p, n, al, (unsigned char) byte (&in), how);
            break;
          }
        case 10: /* malloc_usable_size of a live block, and a partial check */
          if (s->p)
            {
              size_t u = A (malloc_usable_size) (s->p);
              if (u < s->size)
                bug ("malloc_usable_size(%p) = %zu < %zu", (void *) s->p, u, s->size);
              verify (s, s->size < 64 ? s->size : 64, "malloc_usable_size");
            }
          break;
        case 11: /* absurd requests fail cleanly and leave the table intact */
          {
            unsigned which = byte (&in) % 4;
            size_t big = SIZE_MAX - (size_t) byte (&in) * 4096;
            __asm__ volatile ("" : "+r" (big));   /* no compile-time size warnings */
            errno = 0;
            switch (which)
              {
              case 0: expect_enomem (A (malloc) (big), "malloc(huge)"); break;
              case 1: expect_enomem (A (calloc) (big / 2, 3), "calloc(overflow)"); break;
              case 2:
                if (s->p)
                  {
                    expect_enomem (A (realloc) (s->p, big), "realloc(p, huge)");
                    verify (s, s->size, "use after failed realloc");
                  }
                break;
              case 3:
                expect_enomem (A (aligned_alloc) (4096, big & ~(size_t) 4095),
                               "aligned_alloc(huge)");
                break;
              }
            break;
          }
        }
    }
  for (int k = 0; k < NSLOTS; k++)
    if (slots[k].p)
      release (k, "free (end of input)");
  if (live_bytes != 0)
    bug ("shadow model out of step: %zu live bytes with no live block", live_bytes);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  run_input (data, size);
  return 0;
}

#ifndef FUZZ_NO_MAIN
static uint64_t
mix (uint64_t x)
{
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static int
replay (const char *path)
{
  FILE *f = strcmp (path, "-") ? fopen (path, "rb") : stdin;
  if (!f)
    {
      perror (path);
      return 1;
    }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc (cap);
  size_t r;
  while (buf && (r = fread (buf + n, 1, cap - n, f)) > 0)
    {
      n += r;
      if (n == cap)
        buf = realloc (buf, cap *= 2);
    }
  if (f != stdin)
    fclose (f);
  if (!buf)
    return 1;
  run_input (buf, n);
  free (buf);
  return 0;
}

int
main (int argc, char **argv)
{
  uint64_t runs = 0, seed = 1, execs = 0;
  size_t max_len = 256;
  int files = 0;

  for (int i = 1; i < argc; i++)
    {
      if (!strcmp (argv[i], "--random") && i + 1 < argc)
        runs = strtoull (argv[++i], NULL, 0);
      else if (!strcmp (argv[i], "--seed") && i + 1 < argc)
        seed = strtoull (argv[++i], NULL, 0);
      else if (!strcmp (argv[i], "--max-len") && i + 1 < argc)
        max_len = strtoull (argv[++i], NULL, 0);
      else if (argv[i][0] == '-' && argv[i][1] == '-')
        {
          fprintf (stderr, "usage: fuzz-driver FILE... | --random N [--seed S] [--max-len L]\n");
          return 2;
        }
      else
        {
          if (replay (argv[i]))
            return 1;
          files++;
          execs++;
        }
    }
  if (max_len == 0)
    max_len = 1;
  if (runs)
    {
      uint8_t *buf = malloc (max_len);
      uint64_t st = mix (seed);
      for (uint64_t r = 0; r < runs; r++)
        {
          st = mix (st);
          size_t len = 1 + st % max_len;
          for (size_t j = 0; j < len; j += 8)
            {
              st = mix (st);
              memcpy (buf + j, &st, len - j < 8 ? len - j : 8);
            }
          /* mostly small sizes, as libFuzzer starts out: bias the size
           * selector bytes down half of the time */
          if (r & 1)
            for (size_t j = 2; j < len; j += 5)
              buf[j] &= 0x7f;
          run_input (buf, len);
          execs++;
        }
      free (buf);
    }
  if (!files && !runs)
    {
      fprintf (stderr, "usage: fuzz-driver FILE... | --random N [--seed S] [--max-len L]\n");
      return 2;
    }
  printf ("fuzz-driver: %" PRIu64 " executions, %" PRIu64 " operations, seed %" PRIu64 "\n",
          execs, n_ops, seed);
  return 0;
}
#endif
