/* threads: blocks freed by threads other than their allocator, blocks
 * circulating between threads, threads exiting with live blocks, and many
 * short-lived threads (per-thread state must be given back at exit). */
#include "hakmem-test.h"

#include <pthread.h>

/* Run lengths. Under ThreadSanitizer every memory access of the allocator and
 * of the pattern checks is instrumented (5-15x slower), so the loops that only
 * repeat the same interleavings are shortened to fit the suite's timeout;
 * every scenario still runs. */
#if HT_TSAN
#define HT_SCALE(normal, tsan) (tsan)
#else
#define HT_SCALE(normal, tsan) (normal)
#endif

/* A FIFO of pointers between threads, on a pthread mutex and condition
 * variable. (GAsyncQueue would do, but its GMutex/GCond are futexes inside
 * the uninstrumented GLib, so ThreadSanitizer would not see that a push
 * happens before the matching pop and would report the hand-off of every
 * block as a race.) */
typedef struct
{
  pthread_mutex_t lock;
  pthread_cond_t nonempty;
  void **items;
  size_t cap, head, len;
} HtQueue;

static HtQueue *
ht_queue_new (void)
{
  HtQueue *q = g_new0 (HtQueue, 1);
  pthread_mutex_init (&q->lock, NULL);
  pthread_cond_init (&q->nonempty, NULL);
  q->cap = 64;
  q->items = g_new (void *, q->cap);
  return q;
}

static void
ht_queue_free (HtQueue *q)
{
  pthread_cond_destroy (&q->nonempty);
  pthread_mutex_destroy (&q->lock);
  g_free (q->items);
  g_free (q);
}

static void
ht_queue_push (HtQueue *q, void *item)
{
  pthread_mutex_lock (&q->lock);
  if (q->len == q->cap)
    {
      /* Grow, unwrapping the ring so that it starts at index 0. */
      void **items = g_new (void *, q->cap * 2);
      for (size_t i = 0; i < q->len; i++)
        items[i] = q->items[(q->head + i) % q->cap];
      g_free (q->items);
      q->items = items;
      q->head = 0;
      q->cap *= 2;
    }
  q->items[(q->head + q->len) % q->cap] = item;
  q->len++;
  pthread_cond_signal (&q->nonempty);
  pthread_mutex_unlock (&q->lock);
}

static void *
ht_queue_pop (HtQueue *q)
{
  pthread_mutex_lock (&q->lock);
  while (q->len == 0)
    pthread_cond_wait (&q->nonempty, &q->lock);
  void *item = q->items[q->head];
  q->head = (q->head + 1) % q->cap;
  q->len--;
  pthread_mutex_unlock (&q->lock);
  return item;
}

static size_t
ht_queue_length (HtQueue *q)
{
  pthread_mutex_lock (&q->lock);
  size_t n = q->len;
  pthread_mutex_unlock (&q->lock);
  return n;
}

/* Every message block starts with this header; the rest is a pattern. */
typedef struct
{
  size_t size;     /* requested size, >= sizeof (Msg) */
  uint64_t seed;
  int hops;        /* remaining hops (ping-pong) */
  int pad;
} Msg;

static size_t
mixed_size (uint64_t *rng)
{
  uint64_t x = ht_rand (rng);
  size_t s;
  switch (x % 100)
    {
    case 0:
      s = 256 * HT_KiB + (x >> 20) % (2 * HT_MiB);  /* large */
      break;
    case 1 ... 12:
      s = 1024 + (x >> 20) % (64 * HT_KiB);           /* mid */
      break;
    default:
      s = (x >> 20) % 1025;                           /* tiny */
      break;
    }
  return s < sizeof (Msg) ? sizeof (Msg) : s;
}

static Msg *
msg_new (size_t size, uint64_t seed)
{
  Msg *m = T (malloc) (size);
  if (!m)
    g_error ("malloc(%zu) returned NULL in a thread", size);
  if (hak_owns (m) != 1)
    g_error ("hak_owns(malloc(%zu)) != 1 in a thread", size);
  m->size = size;
  m->seed = seed;
  m->hops = 0;
  m->pad = 0;
  ht_fill (m + 1, size - sizeof (Msg), seed);
  return m;
}

static void
msg_check (const Msg *m)
{
  size_t bad = ht_check (m + 1, m->size - sizeof (Msg), m->seed);
  if (bad != SIZE_MAX)
    g_error ("block %p (size %zu, seed %llu) damaged at offset %zu",
             (const void *) m, m->size, (unsigned long long) m->seed,
             bad + sizeof (Msg));
}

static void
msg_free (Msg *m)
{
  msg_check (m);
  T (free) (m);
}

static pthread_t
spawn (void *(*fn) (void *), void *arg)
{
  pthread_t t;
  int rc = pthread_create (&t, NULL, fn, arg);
  if (rc != 0)
    g_error ("pthread_create: %s", g_strerror (rc));
  return t;
}

static void *
join (pthread_t t)
{
  void *ret = NULL;
  g_assert_cmpint (pthread_join (t, &ret), ==, 0);
  return ret;
}

/* ---- cross-thread free: A allocates, B frees --------------------------- */

typedef struct
{
  Msg **blocks;
  size_t n;
  uint64_t seed;
} Batch;

static void *
batch_alloc (void *arg)
{
  Batch *b = arg;
  uint64_t rng = b->seed;
  for (size_t i = 0; i < b->n; i++)
    b->blocks[i] = msg_new (mixed_size (&rng), b->seed * 1000003 + i);
  return NULL;
}

static void *
batch_free (void *arg)
{
  Batch *b = arg;
  /* Free in an order unrelated to allocation order. */
  for (size_t i = 0; i < b->n; i += 2)
    msg_free (b->blocks[i]);
  for (size_t i = b->n; i-- > 0;)
    if (i % 2)
      msg_free (b->blocks[i]);
  return NULL;
}

static void
test_cross_thread_free (void)
{
  enum { N = HT_SCALE (20000, 5000) };
  Batch b = { g_new0 (Msg *, N), N, 0 };

  for (int round = 0; round < 4; round++)
    {
      b.seed = (uint64_t) round + 1;
      join (spawn (batch_alloc, &b));
      /* The allocating thread is gone; a second thread frees. */
      join (spawn (batch_free, &b));
      /* Now A allocates while B frees the previous batch, concurrently. */
      Batch b2 = { g_new0 (Msg *, N), N, (uint64_t) round + 100 };
      join (spawn (batch_alloc, &b));
      pthread_t ta = spawn (batch_alloc, &b2);
      pthread_t tb = spawn (batch_free, &b);
      join (ta);
      join (tb);
      /* The main thread frees what A allocated. */
      batch_free (&b2);
      g_free (b2.blocks);
    }
  g_free (b.blocks);
}

/* Streaming: 2 producers push blocks through a queue to 2 consumers. */
typedef struct
{
  HtQueue *q;
  int count;
  uint64_t seed;
} Stream;

static Msg stop_token;

static void *
producer (void *arg)
{
  Stream *s = arg;
  uint64_t rng = s->seed;
  for (int i = 0; i < s->count; i++)
    ht_queue_push (s->q, msg_new (mixed_size (&rng), s->seed + (uint64_t) i));
  return NULL;
}

static void *
consumer (void *arg)
{
  Stream *s = arg;
  size_t n = 0;
  for (;;)
    {
      Msg *m = ht_queue_pop (s->q);
      if (m == &stop_token)
        break;
      msg_free (m);
      n++;
    }
  return GSIZE_TO_POINTER (n);
}

static void
test_stream (void)
{
  enum { PER_PRODUCER = 30000 };
  HtQueue *q = ht_queue_new ();
  Stream p1 = { q, PER_PRODUCER, 1u << 20 }, p2 = { q, PER_PRODUCER, 2u << 20 };
  Stream c = { q, 0, 0 };

  pthread_t tp1 = spawn (producer, &p1), tp2 = spawn (producer, &p2);
  pthread_t tc1 = spawn (consumer, &c), tc2 = spawn (consumer, &c);
  join (tp1);
  join (tp2);
  ht_queue_push (q, &stop_token);
  ht_queue_push (q, &stop_token);
  size_t n = GPOINTER_TO_SIZE (join (tc1)) + GPOINTER_TO_SIZE (join (tc2));
  g_assert_cmpuint (n, ==, 2 * PER_PRODUCER);
  ht_queue_free (q);
}

/* ---- ping-pong: blocks circulate around a ring of 4 threads ------------ */

enum { RING = 4, TOKENS = 256, HOPS = 200 };

typedef struct
{
  HtQueue *inbox[RING];
  gint live;
} Ring;

typedef struct
{
  Ring *ring;
  int id;
} RingArg;

static void *
ring_thread (void *arg)
{
  RingArg *a = arg;
  Ring *r = a->ring;
  uint64_t rng = (uint64_t) a->id * 7919 + 1;
  HtQueue *next = r->inbox[(a->id + 1) % RING];

  for (;;)
    {
      Msg *m = ht_queue_pop (r->inbox[a->id]);
      if (m == &stop_token)
        break;
      msg_check (m);
      int hops = m->hops - 1;
      if (hops <= 0)
        {
          T (free) (m);
          g_atomic_int_add (&r->live, -1);
          continue;
        }
      uint64_t x = ht_rand (&rng) % 3;
      if (x == 0)
        {
          /* Free here, send a fresh block on. */
          T (free) (m);
          m = msg_new (mixed_size (&rng), ht_rand (&rng));
        }
      else if (x == 1)
        {
          /* Resize a block allocated by another thread. */
          size_t old = m->size, ns = mixed_size (&rng);
          m = T (realloc) (m, ns);
          if (!m)
            g_error ("realloc(%zu -> %zu) returned NULL", old, ns);
          size_t keep = (old < ns ? old : ns) - sizeof (Msg);
          ht_assert_pattern (m + 1, keep, m->seed);
          m->size = ns;
          ht_fill (m + 1, ns - sizeof (Msg), m->seed);
        }
      m->hops = hops;
      ht_queue_push (next, m);
    }
  return NULL;
}

static void
test_ping_pong (void)
{
  Ring r;
  RingArg args[RING];
  pthread_t t[RING];
  uint64_t rng = 77;

  for (int i = 0; i < RING; i++)
    r.inbox[i] = ht_queue_new ();
  r.live = TOKENS;
  for (int i = 0; i < RING; i++)
    {
      args[i].ring = &r;
      args[i].id = i;
      t[i] = spawn (ring_thread, &args[i]);
    }
  for (int k = 0; k < TOKENS; k++)
    {
      Msg *m = msg_new (mixed_size (&rng), (uint64_t) k);
      m->hops = HOPS;
      ht_queue_push (r.inbox[k % RING], m);
    }
  /* Wait for every token to run out of hops (the meson timeout bounds this). */
  while (g_atomic_int_get (&r.live) > 0)
    g_usleep (1000);
  for (int i = 0; i < RING; i++)
    ht_queue_push (r.inbox[i], &stop_token);
  for (int i = 0; i < RING; i++)
    join (t[i]);
  for (int i = 0; i < RING; i++)
    {
      g_assert_cmpint (ht_queue_length (r.inbox[i]), ==, 0);
      ht_queue_free (r.inbox[i]);
    }
}

/* ---- threads exiting with live blocks --------------------------------- */

typedef struct
{
  Msg *live[3000];
  size_t n;
  uint64_t seed;
} Leftover;

static void *
leave_blocks (void *arg)
{
  Leftover *l = arg;
  uint64_t rng = l->seed;
  Msg *tmp[3000];
  /* Allocate, free half (so this thread's caches hold blocks at exit), keep
   * the other half live for main. */
  for (size_t i = 0; i < G_N_ELEMENTS (tmp); i++)
    tmp[i] = msg_new (mixed_size (&rng), l->seed * 100000 + i);
  l->n = 0;
  for (size_t i = 0; i < G_N_ELEMENTS (tmp); i++)
    {
      if (i % 2)
        msg_free (tmp[i]);
      else
        l->live[l->n++] = tmp[i];
    }
  return NULL;
}

static void
test_exit_with_live_blocks (void)
{
  enum { NT = 8 };
  Leftover *l = g_new0 (Leftover, NT);
  pthread_t t[NT];

  for (int i = 0; i < NT; i++)
    {
      l[i].seed = (uint64_t) i + 1;
      t[i] = spawn (leave_blocks, &l[i]);
    }
  for (int i = 0; i < NT; i++)
    join (t[i]);

  /* The exited threads' cached memory gets reused; their live blocks must
   * not be handed out again. */
  uint64_t rng = 99;
  Msg **fresh = g_new0 (Msg *, 20000);
  for (int i = 0; i < 20000; i++)
    fresh[i] = msg_new (mixed_size (&rng), 555555 + (uint64_t) i);
  for (int i = 0; i < NT; i++)
    for (size_t k = 0; k < l[i].n; k++)
      msg_check (l[i].live[k]);

  /* Half of the leftovers freed by main, half by a new thread. */
  for (int i = 0; i < NT; i += 2)
    for (size_t k = 0; k < l[i].n; k++)
      msg_free (l[i].live[k]);
  Batch b = { g_new0 (Msg *, NT / 2 * G_N_ELEMENTS (l[0].live)), 0, 0 };
  for (int i = 1; i < NT; i += 2)
    for (size_t k = 0; k < l[i].n; k++)
      b.blocks[b.n++] = l[i].live[k];
  join (spawn (batch_free, &b));
  g_free (b.blocks);

  for (int i = 0; i < 20000; i++)
    msg_free (fresh[i]);
  g_free (fresh);
  g_free (l);
}

/* ---- many short-lived threads: no per-thread leak --------------------- */

typedef struct
{
  uint64_t seed;
  Msg *keep[4];     /* left live for the main thread to free */
} Cycle;

static void *
cycle_thread (void *arg)
{
  Cycle *c = arg;
  uint64_t rng = c->seed;
  Msg *tiny[600], *mid[24], *large[2];

  for (size_t i = 0; i < G_N_ELEMENTS (tiny); i++)
    tiny[i] = msg_new (sizeof (Msg) + ht_rand (&rng) % 1000, c->seed + i);
  for (size_t i = 0; i < G_N_ELEMENTS (mid); i++)
    mid[i] = msg_new (1024 + ht_rand (&rng) % (48 * HT_KiB), c->seed + 1000 + i);
  for (size_t i = 0; i < G_N_ELEMENTS (large); i++)
    large[i] = msg_new (300 * HT_KiB + ht_rand (&rng) % (700 * HT_KiB),
                        c->seed + 2000 + i);
  for (size_t i = 0; i < G_N_ELEMENTS (c->keep); i++)
    c->keep[i] = msg_new (sizeof (Msg) + ht_rand (&rng) % 3000, c->seed + 3000 + i);

  for (size_t i = 0; i < G_N_ELEMENTS (tiny); i++)
    msg_free (tiny[i]);
  for (size_t i = 0; i < G_N_ELEMENTS (mid); i++)
    msg_free (mid[i]);
  for (size_t i = 0; i < G_N_ELEMENTS (large); i++)
    msg_free (large[i]);
  return NULL;
}

static void
run_cycles (int cycles, int batch)
{
  Cycle *c = g_new0 (Cycle, batch);
  pthread_t *t = g_new0 (pthread_t, batch);

  for (int done = 0; done < cycles; done += batch)
    {
      for (int i = 0; i < batch; i++)
        {
          c[i].seed = (uint64_t) (done + i) * 1000003;
          t[i] = spawn (cycle_thread, &c[i]);
        }
      for (int i = 0; i < batch; i++)
        join (t[i]);
      for (int i = 0; i < batch; i++)
        for (size_t k = 0; k < G_N_ELEMENTS (c[i].keep); k++)
          msg_free (c[i].keep[k]);
    }
  g_free (c);
  g_free (t);
}

static void
test_create_exit_cycles (void)
{
  enum { CYCLES = HT_SCALE (2000, 400) };
  run_cycles (40, 4);   /* warm up: first slabs, caches, thread stacks */
  size_t rss0 = ht_rss_bytes ();
  run_cycles (CYCLES, 4);
  size_t rss1 = ht_rss_bytes ();
  g_test_message ("RSS before %zu KiB, after %d thread cycles %zu KiB",
                  rss0 / 1024, (int) CYCLES, rss1 / 1024);
  if (rss1 > rss0 + 256 * HT_MiB)
    g_error ("RSS grew by %zu MiB over %d thread create/exit cycles: "
             "per-thread memory is not given back at thread exit",
             (rss1 - rss0) / HT_MiB, (int) CYCLES);
}

/* Chains of short-lived detached threads, each freeing the blocks its
 * predecessor left, replacing blocks for a while, leaving a few for its
 * successor, starting it and exiting: the heaps of exited threads must be
 * adopted by the threads that start later, not piled up. (Once, taking all
 * abandoned heaps off the queue to drain them made threads that started
 * meanwhile build new ones: 1,155 heaps after 20,000 such threads.)
 *
 * How many heaps are right depends on how many threads were alive at once,
 * which a loaded machine drives up (exiting threads linger), so the test
 * counts that itself: a thread is alive from its start until its key
 * destructor runs, which is after hakmem's (whose key is older), that is,
 * after its heap was handed back. A new heap is made only when no
 * abandoned one is queued, so every heap then belongs to a live thread or
 * is held for a moment by a live thread draining it: at most two per live
 * thread, the main one included. hak_stats_get reports the count,
 * checked from a subprocess. */
enum { CHAIN_SURVIVORS = 4, CHAIN_SLOTS = 32 };

static pthread_key_t chain_key;
static gint chain_alive, chain_peak;

static void
chain_thread_gone (void *unused)
{
  (void) unused;
  g_atomic_int_add (&chain_alive, -1);
}

static void
chain_thread_started (void)
{
  pthread_setspecific (chain_key, &chain_alive);
  gint now = g_atomic_int_add (&chain_alive, 1) + 1;
  for (gint peak = g_atomic_int_get (&chain_peak);
       now > peak && !g_atomic_int_compare_and_exchange (&chain_peak, peak, now);
       peak = g_atomic_int_get (&chain_peak))
    ;
}

typedef struct
{
  int remaining;
  uint64_t seed;
  Msg *survivors[CHAIN_SURVIVORS];
  gint *chains_done;
} Chain;

static void *
chain_thread (void *arg)
{
  Chain *c = arg;
  chain_thread_started ();
  uint64_t rng = c->seed + (uint64_t) c->remaining;
  Msg *slot[CHAIN_SLOTS] = { 0 };
  for (int i = 0; i < CHAIN_SURVIVORS; i++)
    if (c->survivors[i])
      msg_free (c->survivors[i]);
  for (int i = 0; i < 60; i++)
    {
      size_t k = ht_rand (&rng) % CHAIN_SLOTS;
      if (slot[k])
        msg_free (slot[k]);
      uint64_t x = ht_rand (&rng);   /* 1/8 mid sizes, the rest tiny */
      size_t size = x % 8 ? 16 + (x >> 8) % 497 : 1024 + (x >> 8) % (31 * HT_KiB);
      slot[k] = msg_new (size < sizeof (Msg) ? sizeof (Msg) : size, x);
    }
  for (int k = 0; k < CHAIN_SLOTS; k++)
    {
      if (k < CHAIN_SURVIVORS)
        c->survivors[k] = slot[k];
      else if (slot[k])
        msg_free (slot[k]);
    }
  if (--c->remaining > 0)
    pthread_detach (spawn (chain_thread, c));
  else
    g_atomic_int_inc (c->chains_done);
  return NULL;
}

/* The number of heaps ever made (hak_stats_get). */
static unsigned
stats_heap_count (void)
{
  return (unsigned) ht_stats ().heaps;
}

/* Runs made so far, in every heap. */
static unsigned long long
stats_runs_made (void)
{
  return ht_stats ().runs_made;
}

static void
test_exited_heaps_adopted (void)
{
  enum { CHAINS = 2, THREADS = HT_SCALE (10000, 1000) };
  if (g_test_subprocess ())
    {
      gint done = 0;
      Chain c[CHAINS] = { 0 };
      g_assert_cmpint (pthread_key_create (&chain_key, chain_thread_gone), ==, 0);
      for (int i = 0; i < CHAINS; i++)
        {
          c[i].remaining = THREADS;
          c[i].seed = 77 + (uint64_t) i * 1000003;
          c[i].chains_done = &done;
          pthread_detach (spawn (chain_thread, &c[i]));
        }
      while (g_atomic_int_get (&done) < CHAINS)
        g_usleep (1000);
      /* the last threads are still exiting: hakmem's thread-exit key was
       * made before chain_key, so its destructor (the flush) has run by
       * the time chain_thread_gone counts a thread gone, and the stats
       * below read no heap a thread is still flushing */
      while (g_atomic_int_get (&chain_alive) > 0)
        g_usleep (1000);
      for (int i = 0; i < CHAINS; i++)
        for (int k = 0; k < CHAIN_SURVIVORS; k++)
          if (c[i].survivors[k])
            msg_free (c[i].survivors[k]);
      unsigned heaps = stats_heap_count ();
      gint peak = g_atomic_int_get (&chain_peak);
      g_test_message ("%u heaps after %d threads, at most %d alive at once",
                      heaps, CHAINS * THREADS, peak);
      /* 5 to 10 heaps with 3 to 5 threads alive at once, idle machine or
       * not; 74 to 98 heaps before the fix. Twice the bound, to be safe
       * from what this count cannot see (threads of the test framework) */
      g_assert_cmpuint (heaps, <=, 4 * ((unsigned) peak + 1));
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

/* A thread that allocates a little of many classes, frees it all and
 * exits, one after another: each one adopts the heap its predecessor left
 * and allocates from the runs that heap kept, with their blocks already
 * carved, instead of placing and touching new runs (a run of every class
 * each short-lived thread used; docs/PERFORMANCE.md, "Remote frees and
 * idle heaps"). */
/* 3 blocks a class: one run holds them for every class (from 16 KiB a
 * run is one slab, 3 blocks of 20 KiB), so that with HAKMEM_POOL=none,
 * where each free goes straight to its run, no run empties and goes back
 * while the thread still uses its class. */
enum { SERIAL_THREADS = 50, SERIAL_CLASSES = 48, SERIAL_BLOCKS = 3 };

static void *
many_classes_thread (void *arg)
{
  void *p[SERIAL_CLASSES][SERIAL_BLOCKS];
  for (int c = 0; c < SERIAL_CLASSES; c++)
    for (int k = 0; k < SERIAL_BLOCKS; k++)
      {
        /* tiny classes 16..640 B, then mid ones 4..18 KiB */
        size_t size = c < 40 ? 16 * (size_t) (c + 1) : (size_t) (c - 38) * 2 * HT_KiB;
        p[c][k] = T (malloc) (size);
        g_assert_nonnull (p[c][k]);
        memset (p[c][k], c, size);
      }
  for (int c = 0; c < SERIAL_CLASSES; c++)
    for (int k = 0; k < SERIAL_BLOCKS; k++)
      T (free) (p[c][k]);
  return arg;
}

static void
test_successor_reuses_runs (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (g_test_subprocess ())
    {
      join (spawn (many_classes_thread, NULL));
      unsigned long long first = stats_runs_made ();
      for (int i = 1; i < SERIAL_THREADS; i++)
        join (spawn (many_classes_thread, NULL));
      unsigned long long later = stats_runs_made () - first;
      g_test_message ("first thread (and start-up) made %llu runs, the %d after it %llu",
                      first, SERIAL_THREADS - 1, later);
      /* no new runs at all, but for what a loaded machine's thread
       * scheduling may change; about 49 * 48 when they were released */
      g_assert_cmpuint (later, <, first);
      return;
    }
  /* a long decay period: runs a heap kept are not released under a
   * slow run (valgrind) while the next thread is starting */
  g_setenv ("HAKMEM_DECAY_MS", "60000", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}


/* Checks that the n blocks of b[] still hold `byte` everywhere, and frees them. */
static void
free_checked (void **b, int n, size_t size, int byte)
{
  for (int i = 0; i < n; i++)
    {
      g_assert_true (ht_all_bytes (b[i], size, (unsigned char) byte));
      T (free) (b[i]);
    }
}

/* In the test's parent: runs the test again in a fresh process with
 * HAKMEM_DECAY_MS=10 (read once, at start-up) and checks that it passed. */
static void
rerun_with_decay_10ms (void)
{
  g_setenv ("HAKMEM_DECAY_MS", "10", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_DECAY_MS");
  g_test_trap_assert_passed ();
}

/* SuperSlabs heaps have taken from the pool so far. */
static unsigned long long
stats_superslabs_acquired (void)
{
  return ht_stats ().ss_acquired;
}

/* A thread that leaves half of its blocks to the main thread and exits:
 * the free half sits in its heap's runs. When no thread has adopted that
 * heap for a decay period, a heap that needs memory takes those runs over
 * instead of mapping more: otherwise only a thread adopting the heap
 * could ever use that free half. */
enum { LEFT_BLOCKS = 16384, LEFT_SIZE = 1024 };   /* 16 MiB, half of it left live */
static void *left_blocks[LEFT_BLOCKS];

static void *
leave_half (void *arg)
{
  ht_alloc_filled (left_blocks, LEFT_BLOCKS, LEFT_SIZE, 0x5A);
  for (int i = 0; i < LEFT_BLOCKS; i += 2)
    T (free) (left_blocks[i]);
  return arg;
}

static void
test_exited_heap_memory_reused (void)
{
  if (g_test_subprocess ())
    {
      join (spawn (leave_half, NULL));
      g_usleep (50 * 1000);   /* five decay periods: nobody adopted the heap */
      unsigned long long before = stats_superslabs_acquired ();
      static void *mine[LEFT_BLOCKS / 2];
      ht_alloc_filled (mine, LEFT_BLOCKS / 2, LEFT_SIZE, 0x3C);
      unsigned long long after = stats_superslabs_acquired ();
      g_test_message ("SuperSlabs acquired: %llu before, %llu after", before, after);
      /* 8 MiB needs four or five more SuperSlabs if nothing is reused */
      g_assert_cmpuint (after, <=, before + 1);
      for (int i = 1; i < LEFT_BLOCKS; i += 2)
        {
          g_assert_true (ht_all_bytes (left_blocks[i], LEFT_SIZE, 0x5A));
          T (free) (left_blocks[i]);
        }
      free_checked (mine, LEFT_BLOCKS / 2, LEFT_SIZE, 0x3C);
      return;
    }
  rerun_with_decay_10ms ();
}

/* The main thread sets blocks up and waits while a worker frees them and
 * allocates as many: once the main thread has had no miss for a decay
 * period, the worker borrows the free blocks of its runs (which the main
 * thread, not allocating, never collects from its inbox) instead of
 * carving new runs. */
enum { SETUP_BLOCKS = 8192, SETUP_SIZE = 512 };   /* 4 MiB */
static void *setup_blocks[SETUP_BLOCKS];

static void *
replace_setup_blocks (void *arg)
{
  free_checked (setup_blocks, SETUP_BLOCKS, SETUP_SIZE, 0x11);
  /* the main thread's last miss (starting this thread) is five decay
   * periods old by now */
  g_usleep (50 * 1000);
  unsigned long long before = stats_superslabs_acquired ();
  ht_alloc_filled (setup_blocks, SETUP_BLOCKS, SETUP_SIZE, 0x22);
  *(unsigned long long *) arg = stats_superslabs_acquired () - before;
  return NULL;
}

static void
test_idle_owner_memory_reused (void)
{
  if (g_test_subprocess ())
    {
      ht_alloc_filled (setup_blocks, SETUP_BLOCKS, SETUP_SIZE, 0x11);
      unsigned long long acquired = 0;
      join (spawn (replace_setup_blocks, &acquired));
      g_test_message ("the worker took %llu SuperSlabs for 4 MiB", acquired);
      /* two or three when it carved its own */
      g_assert_cmpuint (acquired, <=, 1);
      free_checked (setup_blocks, SETUP_BLOCKS, SETUP_SIZE, 0x22);
      return;
    }
  rerun_with_decay_10ms ();
}

/* A double free of a borrowed block is still caught: once the borrower
 * flushes it, the block waits in its owner's inbox or runs, where the
 * double-free check must look too (it looked only at the freeing thread's
 * own heap, and the block was then handed out twice). */
enum { LENT_BLOCKS = 10000, LENT_TAKEN = 2000, LENT_SIZE = 64 };
static void *lent[LENT_BLOCKS];

static void *
free_lent (void *arg)
{
  for (int i = 0; i < LENT_BLOCKS; i++)
    T (free) (lent[i]);
  return arg;
}

static void *
double_free_borrowed (void *arg)
{
  static void *mine[LENT_TAKEN], *more[30000];
  ht_alloc_filled (mine, LENT_TAKEN, LENT_SIZE, 0x55);
  void *p = mine[0];
  for (int i = 1; i < LENT_TAKEN / 2; i++)
    T (free) (mine[i]);
  T (free) (p);
  for (int i = LENT_TAKEN / 2; i < LENT_TAKEN / 2 + 100; i++)   /* p leaves the bin */
    T (free) (mine[i]);
  T (free) (p);   /* the double free */
  GHashTable *seen = g_hash_table_new (NULL, NULL);
  for (int i = LENT_TAKEN / 2 + 100; i < LENT_TAKEN; i++)
    g_hash_table_add (seen, mine[i]);
  for (size_t i = 0; i < G_N_ELEMENTS (more); i++)
    {
      more[i] = T (malloc) (LENT_SIZE);
      if (!g_hash_table_add (seen, more[i]))
        g_error ("%p handed out twice after a double free", more[i]);
    }
  ht_free_keys_and_destroy (seen);
  return arg;
}

static void
test_borrowed_double_free (void)
{
  if (g_test_subprocess ())
    {
      ht_alloc_filled (lent, LENT_BLOCKS, LENT_SIZE, 0x44);
      join (spawn (free_lent, NULL));   /* back to the main heap's inbox */
      g_usleep (60 * 1000);            /* the main heap is idle: it lends */
      join (spawn (double_free_borrowed, NULL));
      unsigned long long borrowed = ht_stats ().borrowed_remote;
      g_assert_cmpuint (borrowed, >, 0);   /* the case this test is about */
      return;
    }
  g_setenv ("HAKMEM_ON_ERROR", "warn", TRUE);
  g_setenv ("HAKMEM_DECAY_MS", "10", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_ON_ERROR");
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*double free*");
}

/* A thread that only frees a class (it consumes what another thread
 * allocates) keeps no blocks of it for mallocs it never makes: each time
 * its bin fills (8 blocks) it sends them all to their owner, rather than
 * keep some of every class (docs/PERFORMANCE.md, "Thread caches"). */
enum { CONSUMED_CLASSES = 20, CONSUMED_PER_CLASS = 100, FREE_ONLY_BATCH = 8 };
static void *consumed[CONSUMED_CLASSES * CONSUMED_PER_CLASS];
static gint consumer_done, stats_read;

static void *
consume_and_wait (void *arg)
{
  (void) arg;
  for (int i = 0; i < CONSUMED_CLASSES * CONSUMED_PER_CLASS; i++)
    T (free) (consumed[i]);
  g_atomic_int_set (&consumer_done, 1);
  while (!g_atomic_int_get (&stats_read))   /* alive: its exit would flush its bins */
    g_usleep (1000);
  return NULL;
}

static unsigned long long
stats_remote_frees (void)
{
  return ht_stats ().remote_blocks;
}

/* Blocks freed into the inbox of a heap whose thread has exited, and that
 * no thread adopted, go back to their runs when the thread that freed them
 * exits. Otherwise they wait for a thread that needs a new SuperSlab, and
 * an idle process keeps them resident: two threads that free each other's
 * blocks after their allocators exited could leave most of them
 * resident. */
enum { ORPHAN_BLOCKS = 65536, ORPHAN_SIZE = 256 };   /* 16 MiB */
static void *orphan_blocks[ORPHAN_BLOCKS];
static pthread_barrier_t orphan_sync;

static void *
orphan_maker (void *arg)
{
  for (int i = 0; i < ORPHAN_BLOCKS; i++)
    {
      orphan_blocks[i] = T (malloc) (ORPHAN_SIZE);
      g_assert_nonnull (orphan_blocks[i]);
      memset (orphan_blocks[i], 0x6b, ORPHAN_SIZE);
    }
  return arg;
}

static void *
orphan_feeder (void *arg)
{
  void *own = T (malloc) (64);   /* a heap of its own before the maker exits */
  T (free) (own);
  pthread_barrier_wait (&orphan_sync);   /* ready */
  pthread_barrier_wait (&orphan_sync);   /* the maker has exited */
  free_checked (orphan_blocks, ORPHAN_BLOCKS, ORPHAN_SIZE, 0x6b);
  return arg;
}

static void
test_orphan_inbox_collected (void)
{
  if (g_test_subprocess ())
    {
      g_assert_cmpint (pthread_barrier_init (&orphan_sync, NULL, 2), ==, 0);
      pthread_t feeder = spawn (orphan_feeder, NULL);
      pthread_barrier_wait (&orphan_sync);
      size_t before = ht_stats ().bytes_out;
      unsigned long long remote_before = stats_remote_frees ();
      join (spawn (orphan_maker, NULL));
      size_t made = ht_stats ().bytes_out;
      pthread_barrier_wait (&orphan_sync);
      join (feeder);
      size_t after = ht_stats ().bytes_out;
      unsigned long long remote = stats_remote_frees () - remote_before;
      g_test_message ("small blocks out: %zu KiB before, %zu made, %zu after; %llu remote frees",
                      before / 1024, made / 1024, after / 1024, remote);
      g_assert_cmpuint (made - before, >=, (size_t) ORPHAN_BLOCKS * ORPHAN_SIZE);
      /* the feeder freed the maker's blocks into the maker's orphaned heap */
      g_assert_cmpuint (remote, >=, ORPHAN_BLOCKS);
      /* all of them back in their runs: what is left out is the feeder's
       * own block (16 MiB out when they waited) */
      g_assert_cmpuint (after, <=, before + 64 * HT_KiB);
      g_assert_cmpint (pthread_barrier_destroy (&orphan_sync), ==, 0);
      return;
    }
  /* no decay tick collects them meanwhile */
  g_setenv ("HAKMEM_DECAY_MS", "60000", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_DECAY_MS");
  g_test_trap_assert_passed ();
}

static void
test_consumer_keeps_few_blocks (void)
{
  if (g_test_subprocess ())
    {
      for (int c = 0; c < CONSUMED_CLASSES; c++)
        ht_alloc_filled (consumed + c * CONSUMED_PER_CLASS, CONSUMED_PER_CLASS,
                      48 * (size_t) (c + 1), c);
      pthread_t t = spawn (consume_and_wait, NULL);
      while (!g_atomic_int_get (&consumer_done))
        g_usleep (1000);
      unsigned long long sent = stats_remote_frees ();
      g_atomic_int_set (&stats_read, 1);
      join (t);
      int total = CONSUMED_CLASSES * CONSUMED_PER_CLASS;
      g_test_message ("the consumer sent %llu of the %d blocks it freed while alive", sent, total);
      g_assert_cmpuint (sent, <=, (unsigned long long) total);
      g_assert_cmpuint (sent, >=, (unsigned long long) (total - CONSUMED_CLASSES * FREE_ONLY_BATCH));
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

/* A thread given a block another thread allocated (a dispatcher's
 * request) frees it and mallocs one of the same size for itself: it gets
 * a block of its own heap, not the one it freed. Given back at once, that
 * block (and the next ones) would sit beside the blocks the dispatcher
 * made for the other threads, and the threads' writes would share cache
 * lines for good (front/front.h, HAK_SEND_HOME_MAX). */
enum { SHARED_WORKERS = 4, SHARED_ROUNDS = 4, SHARED_SIZE = 16, CACHE_LINE = 64 };
static void *dispatched[SHARED_WORKERS];
static void *worker_blocks[SHARED_WORKERS][SHARED_ROUNDS];
static pthread_barrier_t shared_sync;

static void *
dispatched_worker (void *arg)
{
  intptr_t k = (intptr_t) arg;
  pthread_barrier_wait (&shared_sync);   /* all alive: each has a heap of its own */
  void *p = dispatched[k];
  for (int r = 0; r < SHARED_ROUNDS; r++)
    {
      memset (p, 0x5a, SHARED_SIZE);
      T (free) (p);
      p = T (malloc) (SHARED_SIZE);
      g_assert_nonnull (p);
      worker_blocks[k][r] = p;
    }
  pthread_barrier_wait (&shared_sync);   /* the others have checked theirs */
  T (free) (p);
  return NULL;
}

static void
test_given_block_goes_home (void)
{
  if (g_test_subprocess ())
    {
      g_assert_cmpint (pthread_barrier_init (&shared_sync, NULL, SHARED_WORKERS + 1), ==, 0);
      for (int k = 0; k < SHARED_WORKERS; k++)   /* in a row: neighbours */
        dispatched[k] = T (malloc) (SHARED_SIZE);
      uintptr_t lines[SHARED_WORKERS];
      for (int k = 0; k < SHARED_WORKERS; k++)
        lines[k] = (uintptr_t) dispatched[k] / CACHE_LINE;
      pthread_t t[SHARED_WORKERS];
      for (intptr_t k = 0; k < SHARED_WORKERS; k++)
        t[k] = spawn (dispatched_worker, (void *) k);
      pthread_barrier_wait (&shared_sync);
      pthread_barrier_wait (&shared_sync);   /* every worker is done with its rounds */
      for (int k = 0; k < SHARED_WORKERS; k++)
        for (int r = 0; r < SHARED_ROUNDS; r++)
          for (int j = 0; j < SHARED_WORKERS; j++)
            if ((uintptr_t) worker_blocks[k][r] / CACHE_LINE == lines[j])
              g_error ("worker %d got %p in round %d, on the cache line of the block made for worker %d (%p)",
                       k, worker_blocks[k][r], r, j, dispatched[j]);
      for (int k = 0; k < SHARED_WORKERS; k++)
        join (t[k]);
      g_assert_cmpint (pthread_barrier_destroy (&shared_sync), ==, 0);
      return;
    }
  /* no heap is idle long enough to lend its blocks (borrow, backend/heap_refill.c) */
  g_setenv ("HAKMEM_DECAY_MS", "60000", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_DECAY_MS");
  g_test_trap_assert_passed ();
}

/* A full bin's batch of another heap's blocks waits for the next thread
 * that misses on the class, which takes it whole, rather than going home
 * to an owner that does not need it (backend/transfer.h); malloc_trim
 * sends what waits home. The owner stays alive and busy with nothing: its
 * blocks come back to a third thread only through the cache. */
enum { PASSED_BLOCKS = 64, PASSED_SIZE = 64 };
static void *passed[PASSED_BLOCKS];
static ht_stage passed_stage = HT_STAGE_INIT;

static void *
passing_owner (void *arg)
{
  ht_alloc_filled (passed, PASSED_BLOCKS, PASSED_SIZE, 0x2d);
  ht_stage_set (&passed_stage, 1);
  ht_stage_wait (&passed_stage, 2);   /* alive until the test is done */
  return arg;
}

static void *
passing_consumer (void *arg)
{
  for (int i = 0; i < PASSED_BLOCKS; i++)
    T (free) (passed[i]);
  return arg;
}

static void *
passing_taker (void *arg)
{
  void *p = T (malloc) ((size_t) (uintptr_t) arg);
  g_assert_nonnull (p);
  return p;
}

/* 1 if a fresh thread's first malloc of size bytes gets one of the n
 * blocks. */
static gboolean
taker_gets_one_of (size_t size, void *const *blocks, int n)
{
  void *p = join (spawn (passing_taker, (void *) (uintptr_t) size));
  gboolean found = FALSE;
  for (int i = 0; i < n; i++)
    found |= p == blocks[i];
  T (free) (p);
  return found;
}

/* The owner's batch, parked by the consumer's full bin, reaches a fresh
 * thread's first malloc of size bytes; once it has gone home
 * (malloc_trim), the next taker carves its own. */
static void
check_batch_passes_on (size_t size)
{
  if (!ht_front_bins_or_skip ("no front cache bins, no batches"))
    return;
  if (g_test_subprocess ())
    {
      T (free) (T (malloc) (16));   /* this thread has a heap: malloc_trim works through it */
      pthread_t owner = spawn (passing_owner, NULL);
      ht_stage_wait (&passed_stage, 1);
      join (spawn (passing_consumer, NULL));
      g_assert_true (taker_gets_one_of (size, passed, PASSED_BLOCKS));
      T (malloc_trim) (0);
      g_assert_false (taker_gets_one_of (size, passed, PASSED_BLOCKS));
      ht_stage_set (&passed_stage, 2);
      join (owner);
      return;
    }
  g_setenv ("HAKMEM_DECAY_MS", "60000", TRUE);   /* no batch goes home on the clock, no heap lends */
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_DECAY_MS");
  g_test_trap_assert_passed ();
}

static void
test_full_bin_batch_passes_on (void)
{
  check_batch_passes_on (PASSED_SIZE);
}

/* A tiny class with no free block at hand takes a larger class's waiting
 * batch rather than carving new pages (front/batch.c): 64-byte blocks
 * stand in for 48-byte ones (hak_class_stands_in). Once the batches have
 * gone home, a taker of 48 bytes carves its own. */
static void
test_larger_batch_stands_in (void)
{
  check_batch_passes_on (48);
}

/* Blocks sent back to a heap whose thread is busy are lent before another
 * thread carves new pages, when they are 128 bytes or more
 * (backend/heap_refill.c, borrow): a 256-byte malloc of a fresh thread
 * gets one of them. Smaller ones stay with their heap, so that two
 * threads' blocks do not share cache lines: a 64-byte malloc carves its
 * own. */
enum { BUSY_LENT_BLOCKS = 64, BUSY_LENT_BIG = 256, BUSY_LENT_SMALL = 64 };
static void *busy_lent_big[BUSY_LENT_BLOCKS], *busy_lent_small[BUSY_LENT_BLOCKS];
static ht_stage busy_lent_stage = HT_STAGE_INIT;

static void *
lending_owner (void *arg)
{
  ht_alloc_filled (busy_lent_big, BUSY_LENT_BLOCKS, BUSY_LENT_BIG, 0x4e);
  ht_alloc_filled (busy_lent_small, BUSY_LENT_BLOCKS, BUSY_LENT_SMALL, 0x4f);
  ht_stage_set (&busy_lent_stage, 1);
  ht_stage_wait (&busy_lent_stage, 2);   /* alive (and not idle) until the test is done */
  return arg;
}

static void *
busy_lent_freer (void *arg)
{
  for (int i = 0; i < BUSY_LENT_BLOCKS; i++)
    {
      T (free) (busy_lent_big[i]);
      T (free) (busy_lent_small[i]);
    }
  return arg;
}

static void
test_busy_heap_lends_big_blocks (void)
{
  if (!ht_front_bins_or_skip ("no front cache bins"))
    return;
  if (g_test_subprocess ())
    {
      T (free) (T (malloc) (16));   /* this thread has a heap: malloc_trim works through it */
      pthread_t owner = spawn (lending_owner, NULL);
      ht_stage_wait (&busy_lent_stage, 1);
      join (spawn (busy_lent_freer, NULL));
      T (malloc_trim) (0);   /* every block home: none waits in a transfer batch */
      g_assert_true (taker_gets_one_of (BUSY_LENT_BIG, busy_lent_big, BUSY_LENT_BLOCKS));
      g_assert_false (taker_gets_one_of (BUSY_LENT_SMALL, busy_lent_small, BUSY_LENT_BLOCKS));
      ht_stage_set (&busy_lent_stage, 2);
      join (owner);
      return;
    }
  g_setenv ("HAKMEM_DECAY_MS", "60000", TRUE);   /* no heap is idle: only busy ones lend */
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("HAKMEM_DECAY_MS");
  g_test_trap_assert_passed ();
}

/* A thread that frees blocks of several heaps mixed (a consumer fed by
 * several producers) sends each batch with one push per owner: its flush
 * gathers the blocks by owner; a push at every change of owner would
 * make blocks of two heaps freed in turn take one push (and one stretch
 * for the owner's drain) each. */
enum { MIXED_OWNERS = 2, MIXED_BLOCKS = 4096, MIXED_SIZE = 200 };
static void *mixed[MIXED_OWNERS][MIXED_BLOCKS];
static gint mixed_made, mixed_freed;

static void *
mixed_owner (void *arg)
{
  ht_alloc_filled (mixed[(intptr_t) arg], MIXED_BLOCKS, MIXED_SIZE, 0x3c);
  g_atomic_int_inc (&mixed_made);
  while (!g_atomic_int_get (&mixed_freed))   /* alive: its heap stays its own */
    g_usleep (1000);
  return NULL;
}

static void *
mixed_consumer (void *arg)
{
  for (int i = 0; i < MIXED_BLOCKS; i++)
    for (int k = 0; k < MIXED_OWNERS; k++)
      T (free) (mixed[k][i]);
  return arg;
}

static void
test_consumer_pushes_per_owner (void)
{
  if (!ht_front_bins_or_skip ("no front cache box: every tiny free is a flush of its own"))
    return;
  if (g_test_subprocess ())
    {
      pthread_t owner[MIXED_OWNERS];
      for (intptr_t k = 0; k < MIXED_OWNERS; k++)
        owner[k] = spawn (mixed_owner, (void *) k);
      while (g_atomic_int_get (&mixed_made) < MIXED_OWNERS)
        g_usleep (1000);
      unsigned long long frees = stats_remote_frees ();
      unsigned long long pushes = ht_stats ().remote_pushes;
      join (spawn (mixed_consumer, NULL));   /* its exit sends what its bin kept */
      frees = stats_remote_frees () - frees;
      pushes = ht_stats ().remote_pushes - pushes;
      g_atomic_int_set (&mixed_freed, 1);
      for (int k = 0; k < MIXED_OWNERS; k++)
        join (owner[k]);
      g_test_message ("%llu remote frees in %llu pushes", frees, pushes);
      g_assert_cmpuint (frees, >=, (unsigned long long) MIXED_OWNERS * MIXED_BLOCKS);
      /* batches of 8 blocks (a bin of a class the thread only frees,
       * src/front/batch.c), 4 of each owner: 2 pushes a batch (1 a block
       * before), after the first 8 frees, each sent home on its own
       * while the bin was unprimed (front/front.h, HAK_SEND_HOME_MAX) */
      g_assert_cmpuint (pushes, <=, frees / 4 + FREE_ONLY_BATCH);
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

/* A refill carves about a page of new blocks at most: blocks carved but
 * never asked for stay resident for nothing. Only
 * until the class has had HAK_CARVE_STREAK such refills in a row by
 * itself (backend/heap_refill.c, carve_cap), after which it carves up to half a
 * bin: 12 blocks of the 1040-byte class, 3 a page, take four refills. */
enum { CARVED_WANTED = 12, CARVED_SIZE = 1000 };

/* Refills of, and blocks carved for, the class of blocks of `size` bytes:
 * the first class of that size with refills (two classes may have one
 * size, see src/base/size_class.h), 0 and 0 when none has any yet. */
static void
stats_class (unsigned size, unsigned long long *refills, unsigned long long *carved)
{
  struct hak_stats s = ht_stats ();
  *refills = *carved = 0;
  for (uint32_t c = 1; c < s.nclasses; c++)
    if (s.classes[c].size == size && s.classes[c].refills)
      {
        *refills = s.classes[c].refills;
        *carved = s.classes[c].carved_blocks;
        return;
      }
}

static unsigned long long
stats_class_carved (unsigned size)
{
  unsigned long long refills, carved;
  stats_class (size, &refills, &carved);
  return carved;
}

static void *
alloc_carved_class (void *arg)
{
  void **b = arg;
  ht_alloc_filled (b, CARVED_WANTED, CARVED_SIZE, 0x3c);
  return NULL;
}

static void
test_refill_carves_a_page (void)
{
  if (!ht_plain_blocks_or_skip ("the hardened box gives bins no room: blocks come one at a time"))
    return;
  if (g_test_subprocess ())
    {
      void *b[CARVED_WANTED];
      unsigned class_size = (unsigned) ht_class_size (CARVED_SIZE);
      unsigned long long before = stats_class_carved (class_size);
      join (spawn (alloc_carved_class, b));   /* a new heap: it has nothing to reuse */
      unsigned long long carved = stats_class_carved (class_size) - before;
      g_test_message ("%llu blocks carved for %d of %u B", carved, (int) CARVED_WANTED, class_size);
      g_assert_cmpuint (carved, >=, CARVED_WANTED);
      g_assert_cmpuint (carved, <, CARVED_WANTED + 4 * HT_KiB / class_size);
      free_checked (b, CARVED_WANTED, CARVED_SIZE, 0x3c);
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

/* A new thread that allocates `wanted` blocks of `size` bytes, and
 * nothing else, in a fresh process (so that its heap has nothing to
 * reuse): the refills and carved blocks of their class must show that it
 * carved in runs, up to HAK_CARVE_GROWN_PAGES (8) pages beyond the blocks
 * asked for, with at most wanted / 8 refills. */
typedef struct
{
  void **blocks;
  int wanted;
  size_t size;
} Growth;

static void *
alloc_growth (void *arg)
{
  Growth *g = arg;
  ht_alloc_filled (g->blocks, (size_t) g->wanted, g->size, 0x5e);
  return NULL;
}

static void
check_growth_refills_in_runs (int wanted, size_t size)
{
  Growth g = { g_new0 (void *, wanted), wanted, size };
  unsigned class_size = (unsigned) ht_class_size (size);
  unsigned long long refills0, carved0, refills, carved;
  stats_class (class_size, &refills0, &carved0);
  join (spawn (alloc_growth, &g));   /* a new heap: it has nothing to reuse */
  stats_class (class_size, &refills, &carved);
  refills -= refills0;
  carved -= carved0;
  g_test_message ("%llu refills, %llu blocks carved for %d of %u B", refills, carved, wanted, class_size);
  g_assert_cmpuint (carved, >=, (unsigned) wanted);
  g_assert_cmpuint (carved, <, wanted + 8 * 4 * HT_KiB / class_size);
  g_assert_cmpuint (refills, <=, (unsigned) wanted / 8);
  free_checked (g.blocks, wanted, size, 0x5e);
  g_free (g.blocks);
}

/* A thread that only grows a mid class (a page cache) takes a miss for a
 * run of blocks, not for every block: a page holds one 2304-byte block,
 * and refills once carved one at a time (110,000 refills for
 * as many blocks, 400 for the 400 here; 833 instructions a malloc+free,
 * glibc's 341). */
static void
test_growing_mid_class_refills_in_runs (void)
{
  if (!ht_pool_bins_or_skip ("no Pool TLS box: every mid malloc goes to the heap, no bin to refill"))
    return;
  if (ht_in_fresh_process ())
    check_growth_refills_in_runs (400, 2200);
}

/* The same for a tiny class, when it is the only class the heap is
 * carving for: a thread that grows one class of 700-byte blocks refills
 * a bin's half (16 KiB) at a time, not a page (5 blocks: 400 refills for
 * the 2000 here). A random mix keeps the one-page carve: its
 * classes' refills interleave, and carving ahead for each of them would
 * leave every class of the mix with blocks nobody asked for
 * (docs/PERFORMANCE.md, "Refill and carving"). */
static void
test_growing_tiny_class_alone_refills_in_runs (void)
{
  if (!ht_front_bins_or_skip ("no front cache box: every tiny malloc goes to the heap, no bin to refill"))
    return;
  if (ht_in_fresh_process ())
    check_growth_refills_in_runs (2000, 700);
}

/* A flush gives a bin's blocks back to their runs a slab at a time
 * (backend/heap_flush.c). Three runs' worth of blocks freed interleaved, so
 * that each flushed block starts a new stretch, then in allocation
 * order, so that stretches are long: each time every block must be back
 * on its run's free list exactly once. The first thread keeps one block
 * of each run, so that no run empties and goes back (with
 * HAKMEM_FRONT=none every free is a flush of its own); the thread that
 * adopts its heap next asks for as many blocks as went back and must get
 * exactly those: a lost one would be replaced by a new block, at a new
 * address, and one on a free list twice would come out twice. */
enum { FLUSHED_RUNS = 3, FLUSHED_PER_RUN = 512, FLUSHED_SIZE = 128,
       FLUSHED_ALL = FLUSHED_RUNS * FLUSHED_PER_RUN,
       FLUSHED = FLUSHED_ALL - FLUSHED_RUNS };   /* blocks that go back */

typedef struct
{
  void *blocks[FLUSHED_ALL];
  int count;              /* blocks to allocate */
  gboolean keep_one;      /* keep the last block of each run */
  gboolean interleaved;   /* how this thread frees them */
  void *freed[FLUSHED_ALL];   /* then: the blocks it freed, sorted */
  int nfreed;
} Flushed;

static gint
compare_pointers (gconstpointer a, gconstpointer b)
{
  uintptr_t x = *(const uintptr_t *) a, y = *(const uintptr_t *) b;
  return x < y ? -1 : x > y;
}

static void *
flushed_thread (void *arg)
{
  Flushed *f = arg;
  int n = f->count, third = n / FLUSHED_RUNS;
  ht_alloc_filled (f->blocks, (size_t) n, FLUSHED_SIZE, 0x6b);
  f->nfreed = 0;
  for (int i = 0; i < n; i++)
    {
      /* block i of every third in turn, or all in the order they came */
      int k = f->interleaved ? (i % FLUSHED_RUNS) * third + i / FLUSHED_RUNS : i;
      if (f->keep_one && k % FLUSHED_PER_RUN == FLUSHED_PER_RUN - 1)
        continue;
      g_assert_true (ht_all_bytes (f->blocks[k], FLUSHED_SIZE, 0x6b));
      T (free) (f->blocks[k]);
      f->freed[f->nfreed++] = f->blocks[k];
    }
  qsort (f->freed, (size_t) f->nfreed, sizeof f->freed[0],
         (int (*) (const void *, const void *)) compare_pointers);
  return NULL;
}

static void
test_flush_returns_each_block_once (void)
{
  if (!ht_plain_blocks_or_skip ("freed blocks wait in the hardened box's quarantine"))
    return;
  if (g_test_subprocess ())
    {
      Flushed *first = g_new0 (Flushed, 1), *again = g_new0 (Flushed, 1);
      *first = (Flushed) { .count = FLUSHED_ALL, .keep_one = TRUE, .interleaved = TRUE };
      join (spawn (flushed_thread, first));   /* a new heap: its blocks are new */
      g_assert_cmpint (first->nfreed, ==, FLUSHED);
      for (int pass = 0; pass < 2; pass++)
        {
          *again = (Flushed) { .count = FLUSHED, .interleaved = pass == 1 };
          join (spawn (flushed_thread, again));   /* adopts the heap the last one left */
          g_assert_cmpint (again->nfreed, ==, FLUSHED);
          for (int i = 0; i < FLUSHED; i++)
            {
              g_assert_true (i == 0 || again->freed[i] != again->freed[i - 1]);
              g_assert_true (again->freed[i] == first->freed[i]);
            }
        }
      g_free (first);
      g_free (again);
      return;
    }
  /* runs a heap keeps for its successor are not released while the next
   * thread starts (a slow run: valgrind) */
  g_setenv ("HAKMEM_DECAY_MS", "60000", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

/* Key destructors that run after hakmem's (their keys are newer) allocate
 * and free: the blocks they get must be sound, freeable anywhere later,
 * and no heap may be left behind per thread. */
enum { LATE_THREADS = 100 };
static pthread_key_t late_key;
static Msg *late_blocks[LATE_THREADS];
static gint late_count;

static void
late_destructor (void *arg)
{
  Msg *mine = arg;
  msg_free (mine);                  /* a free after the thread's teardown */
  Msg *m = msg_new (300, 99);      /* and a malloc */
  late_blocks[g_atomic_int_add (&late_count, 1)] = m;
}

static void *
late_thread (void *arg)
{
  (void) arg;
  pthread_setspecific (late_key, msg_new (200, 98));
  return NULL;
}

static void
test_late_destructors (void)
{
  if (g_test_subprocess ())
    {
      g_assert_cmpint (pthread_key_create (&late_key, late_destructor), ==, 0);
      for (int i = 0; i < LATE_THREADS; i++)
        join (spawn (late_thread, NULL));
      g_assert_cmpint (g_atomic_int_get (&late_count), ==, LATE_THREADS);
      for (int i = 0; i < LATE_THREADS; i++)
        msg_free (late_blocks[i]);
      unsigned heaps = stats_heap_count ();
      g_test_message ("%u heaps after %d threads", heaps, (int) LATE_THREADS);
      g_assert_cmpuint (heaps, <=, 4);
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

/* All threads hammer the same size classes at once. */
static void *
hammer (void *arg)
{
  uint64_t rng = GPOINTER_TO_SIZE (arg);
  Msg *slot[64] = { 0 };
  for (int i = 0; i < 100000; i++)
    {
      size_t k = ht_rand (&rng) % 64;
      if (slot[k])
        msg_free (slot[k]);
      slot[k] = msg_new (sizeof (Msg) + (k % 8) * 16 + (k == 3 ? 5000 : 0),
                         ht_rand (&rng));
    }
  for (int k = 0; k < 64; k++)
    if (slot[k])
      msg_free (slot[k]);
  return NULL;
}

static void
test_contention (void)
{
  enum { NT = 8 };
  pthread_t t[NT];
  for (int i = 0; i < NT; i++)
    t[i] = spawn (hammer, GSIZE_TO_POINTER ((gsize) i + 1));
  for (int i = 0; i < NT; i++)
    join (t[i]);
}

/* The hardened box bounds its quarantines by the process: with more than
 * four threads holding its state, each holds four quarantines' worth
 * shared among them. A block written after its free is checked (and the
 * write reported) when it leaves its thread's quarantine: 86 to 96 KiB
 * of other frees (blocks of a class up to 320 B) leave it in a
 * quarantine of HAKMEM_QUARANTINE_KB (128 KiB) when its thread is the
 * only one, and push it out of its share (57 KiB) when eight more
 * threads hold state. Each case runs in a subprocess, as the report
 * aborts it. */
enum { QSHARE_SIZE = 256, QSHARE_OTHERS = 8, QSHARE_FREED = 96 << 10 };
static pthread_barrier_t qshare_ready, qshare_done;

static void *
qshare_thread (void *arg)
{
  (void) arg;
  T (free) (T (malloc) (QSHARE_SIZE));   /* the box's state for this thread */
  pthread_barrier_wait (&qshare_ready);
  pthread_barrier_wait (&qshare_done);
  return NULL;
}

static void
qshare_case (unsigned others)
{
  pthread_t t[QSHARE_OTHERS];
  g_assert_cmpint (pthread_barrier_init (&qshare_ready, NULL, others + 1), ==, 0);
  g_assert_cmpint (pthread_barrier_init (&qshare_done, NULL, others + 1), ==, 0);
  for (unsigned i = 0; i < others; i++)
    t[i] = spawn (qshare_thread, NULL);
  pthread_barrier_wait (&qshare_ready);
  size_t n = QSHARE_FREED / (QSHARE_SIZE + 64);   /* blocks of a class up to 320 B */
  void **v = T (malloc) (n * sizeof *v);
  for (size_t i = 0; i < n; i++)
    v[i] = T (malloc) (QSHARE_SIZE);
  unsigned char *p = T (malloc) (QSHARE_SIZE);
  T (free) (p);
  ((volatile unsigned char *) p)[16] ^= 0xa5;   /* the bug: a write after free */
  for (size_t i = 0; i < n; i++)
    T (free) (v[i]);
  pthread_barrier_wait (&qshare_done);
  for (unsigned i = 0; i < others; i++)
    join (t[i]);
  T (free) (v);
}

static void
test_hardened_quarantine_shared (void)
{
  if (!ht_safety_hardened () || g_getenv ("HAKMEM_QUARANTINE_KB"))
    {
      g_test_skip ("the hardened box's quarantine, at its default size");
      return;
    }
  if (g_test_subprocess ())
    {
      qshare_case ((unsigned) atoi (g_getenv ("HT_QSHARE_OTHERS")));
      return;
    }
  char others[16];
  g_snprintf (others, sizeof others, "%d", QSHARE_OTHERS);
  g_setenv ("HT_QSHARE_OTHERS", "0", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_setenv ("HT_QSHARE_OTHERS", others, TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*write after free*");
  g_unsetenv ("HT_QSHARE_OTHERS");
}

/* The hardened box's stash takes a block out of its thread's quarantine
 * whichever heap owns it, as the default's bins do: blocks another
 * thread allocated, freed here, come back from this thread's mallocs
 * while their owner still runs (they are not sent home first). A
 * second free of one of them is still a double free. */
enum { FOREIGN_SIZE = 200, FOREIGN_N = 64, FOREIGN_ROUNDS = 8192 };
static void *foreign_blocks[FOREIGN_N];
static pthread_barrier_t foreign_ready, foreign_done;

static void *
foreign_owner (void *arg)
{
  (void) arg;
  for (unsigned i = 0; i < FOREIGN_N; i++)
    foreign_blocks[i] = T (malloc) (FOREIGN_SIZE);
  pthread_barrier_wait (&foreign_ready);
  pthread_barrier_wait (&foreign_done);   /* alive until the main thread is done */
  return NULL;
}

static int
is_foreign (const void *p)
{
  for (unsigned i = 0; i < FOREIGN_N; i++)
    if (foreign_blocks[i] == p)
      return 1;
  return 0;
}

/* Frees the owner's blocks here, then mallocs and frees blocks of their
 * class until one of them comes back (the quarantine passes them on in
 * the order of their frees); returns it, or NULL. */
static void *
foreign_block_back (void)
{
  for (unsigned i = 0; i < FOREIGN_N; i++)
    T (free) (foreign_blocks[i]);
  for (unsigned r = 0; r < FOREIGN_ROUNDS; r++)
    {
      void *p = T (malloc) (FOREIGN_SIZE);
      g_assert_nonnull (p);
      if (is_foreign (p))
        return p;
      T (free) (p);
    }
  return NULL;
}

/* Each case in a fresh process: in the test's own, the owner may take a
 * heap an earlier test's thread left, whose free blocks of larger classes
 * stand in for its own (backend/heap_refill.c), and those never come
 * back from mallocs of FOREIGN_SIZE. */
static void
foreign_case (int twice)
{
  g_assert_cmpint (pthread_barrier_init (&foreign_ready, NULL, 2), ==, 0);
  g_assert_cmpint (pthread_barrier_init (&foreign_done, NULL, 2), ==, 0);
  pthread_t t = spawn (foreign_owner, NULL);
  pthread_barrier_wait (&foreign_ready);
  void *p = foreign_block_back ();
  g_assert_nonnull (p);
  if (twice)
    {
      /* another of the owner's blocks freed here: out of the
       * quarantine (into the stash or on its way home) or still in it */
      void *q = NULL;
      for (unsigned i = 0; i < FOREIGN_N && !q; i++)
        if (foreign_blocks[i] != p)
          q = foreign_blocks[i];
      T (free) (q);   /* the bug: freed twice, its first free here too */
    }
  else
    {
      T (free) (p);
    }
  pthread_barrier_wait (&foreign_done);
  join (t);
}

static void
test_hardened_stash_takes_foreign_blocks (void)
{
  if (!ht_safety_hardened () || g_getenv ("HAKMEM_QUARANTINE_KB"))
    {
      g_test_skip ("the hardened box's stash, with its default quarantine");
      return;
    }
  if (g_test_subprocess ())
    {
      foreign_case (atoi (g_getenv ("HT_FOREIGN_TWICE")));
      return;
    }
  g_setenv ("HT_FOREIGN_TWICE", "0", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_setenv ("HT_FOREIGN_TWICE", "1", TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*double free*");
  g_unsetenv ("HT_FOREIGN_TWICE");
}

/* The hardened box hands out a run's blocks in a random order, given
 * when they enter the thread's stash from the heap: two threads that
 * start at once, each on a new heap of its own in a fresh process, take
 * their first blocks of a class from runs carved in address order; each
 * gets them in an order that is not the address order (up or down), and
 * the two orders differ (each thread's stash draws from its own random
 * state). */
enum { ORDER_SIZE = 200, ORDER_N = 32 };
static pthread_barrier_t order_start;

static void *
order_thread (void *arg)
{
  unsigned *rank = arg;
  void *v[ORDER_N];
  pthread_barrier_wait (&order_start);
  for (unsigned i = 0; i < ORDER_N; i++)
    v[i] = T (malloc) (ORDER_SIZE);
  /* the order as ranks of the addresses: comparable between threads */
  for (unsigned i = 0; i < ORDER_N; i++)
    {
      rank[i] = 0;
      for (unsigned j = 0; j < ORDER_N; j++)
        rank[i] += (uintptr_t) v[j] < (uintptr_t) v[i];
    }
  for (unsigned i = 0; i < ORDER_N; i++)
    T (free) (v[i]);
  return NULL;
}

static void
test_hardened_order_random (void)
{
  if (!ht_safety_hardened ())
    {
      g_test_skip ("the random order is the hardened box's");
      return;
    }
  if (!ht_in_fresh_process ())
    return;
  unsigned rank[2][ORDER_N];
  g_assert_cmpint (pthread_barrier_init (&order_start, NULL, 2), ==, 0);
  pthread_t a = spawn (order_thread, rank[0]), b = spawn (order_thread, rank[1]);
  join (a);
  join (b);
  for (unsigned t = 0; t < 2; t++)
    {
      unsigned up = 0, down = 0;
      for (unsigned i = 1; i < ORDER_N; i++)
        {
          up += rank[t][i] > rank[t][i - 1];
          down += rank[t][i] < rank[t][i - 1];
        }
      g_assert_cmpuint (up, <, ORDER_N - 1);
      g_assert_cmpuint (down, <, ORDER_N - 1);
    }
  g_assert_true (memcmp (rank[0], rank[1], sizeof rank[0]) != 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/threads/cross-thread-free", test_cross_thread_free);
  g_test_add_func ("/threads/stream", test_stream);
  g_test_add_func ("/threads/ping-pong", test_ping_pong);
  g_test_add_func ("/threads/exit-with-live-blocks", test_exit_with_live_blocks);
  g_test_add_func ("/threads/create-exit-cycles", test_create_exit_cycles);
  g_test_add_func ("/threads/contention", test_contention);
  g_test_add_func ("/threads/exited-heaps-adopted", test_exited_heaps_adopted);
  g_test_add_func ("/threads/late-destructors", test_late_destructors);
  g_test_add_func ("/threads/successor-reuses-runs", test_successor_reuses_runs);
  g_test_add_func ("/threads/exited-heap-memory-reused", test_exited_heap_memory_reused);
  g_test_add_func ("/threads/idle-owner-memory-reused", test_idle_owner_memory_reused);
  g_test_add_func ("/threads/borrowed-double-free", test_borrowed_double_free);
  g_test_add_func ("/threads/consumer-keeps-few-blocks", test_consumer_keeps_few_blocks);
  g_test_add_func ("/threads/consumer-pushes-per-owner", test_consumer_pushes_per_owner);
  g_test_add_func ("/threads/given-block-goes-home", test_given_block_goes_home);
  g_test_add_func ("/threads/full-bin-batch-passes-on", test_full_bin_batch_passes_on);
  g_test_add_func ("/threads/larger-batch-stands-in", test_larger_batch_stands_in);
  g_test_add_func ("/threads/busy-heap-lends-big-blocks", test_busy_heap_lends_big_blocks);
  g_test_add_func ("/threads/orphan-inbox-collected", test_orphan_inbox_collected);
  g_test_add_func ("/threads/refill-carves-a-page", test_refill_carves_a_page);
  g_test_add_func ("/threads/growing-mid-class-refills-in-runs", test_growing_mid_class_refills_in_runs);
  g_test_add_func ("/threads/growing-tiny-class-alone-refills-in-runs",
                   test_growing_tiny_class_alone_refills_in_runs);
  g_test_add_func ("/threads/flush-returns-each-block-once", test_flush_returns_each_block_once);
  g_test_add_func ("/threads/hardened-quarantine-shared", test_hardened_quarantine_shared);
  g_test_add_func ("/threads/hardened-stash-takes-foreign-blocks", test_hardened_stash_takes_foreign_blocks);
  g_test_add_func ("/threads/hardened-order-random", test_hardened_order_random);

  return g_test_run ();
}
