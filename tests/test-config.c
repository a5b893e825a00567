/* config: the environment variables read once at start-up. Each case runs
 * this same binary again as a child ("--hakmem-child MODE") with a chosen
 * environment, since the allocator reads its environment only at init, and
 * checks the child's exit status and output. */
#include "hakmem-test.h"

#include <pthread.h>
#include <sys/wait.h>

/* ---- child side ---------------------------------------------------------- */

static void *
smoke_thread (void *arg)
{
  uint64_t rng = GPOINTER_TO_SIZE (arg);
  void *p[256] = { 0 };
  for (int i = 0; i < 20000; i++)
    {
      size_t k = ht_rand (&rng) % 256;
      T (free) (p[k]);
      size_t n = ht_rand (&rng) % (k == 0 ? 600000 : 2000);
      p[k] = T (malloc) (n);
      if (!p[k])
        return GINT_TO_POINTER (1);
      memset (p[k], (int) k, n);
    }
  for (int k = 0; k < 256; k++)
    T (free) (p[k]);
  return NULL;
}

/* A short run over the whole API; returns a non-zero code on failure. */
static int
smoke (void)
{
  unsigned char *p = T (malloc) (100);
  if (!p || hak_owns (p) != 1)
    return 2;
  memset (p, 0xAA, 100);
  T (free) (p);
  p = T (calloc) (1, 100);
  if (!p || !ht_all_bytes (p, 100, 0))
    return 3;
  p = T (realloc) (p, 5 * HT_MiB);
  if (!p || !ht_all_bytes (p, 100, 0))
    return 4;
  T (free) (p);
  void *a = T (aligned_alloc) (HT_MiB, 1000);
  if (!a || ((uintptr_t) a & (HT_MiB - 1)))
    return 5;
  T (free) (a);
  void *f = __libc_malloc (64);
  T (free) (f);

  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    if (pthread_create (&t[i], NULL, smoke_thread, GSIZE_TO_POINTER ((gsize) i + 1)))
      return 6;
  int rc = 0;
  for (int i = 0; i < 4; i++)
    {
      void *ret;
      pthread_join (t[i], &ret);
      if (ret)
        rc = 7;
    }
  return rc;
}

/* Sum of `field` (kB) over the mappings of /proc/self/smaps that hold
 * any of the n addresses. */
static unsigned long
smaps_kb_over (const uintptr_t *addr, int n, const char *field)
{
  FILE *f = fopen ("/proc/self/smaps", "r");
  char line[512];
  unsigned long lo = 0, hi = 0, sum = 0;
  int in = 0;
  size_t flen = strlen (field);
  if (!f)
    return 0;
  while (fgets (line, sizeof line, f))
    {
      char *dash = strchr (line, '-'), *space = strchr (line, ' ');
      if (dash && space && dash < space && sscanf (line, "%lx-%lx", &lo, &hi) == 2)
        {
          in = 0;
          for (int i = 0; i < n; i++)
            in |= addr[i] >= lo && addr[i] < hi;
        }
      else if (in && !strncmp (line, field, flen) && line[flen] == ':')
        sum += strtoul (line + flen + 1, NULL, 10);
    }
  fclose (f);
  return sum;
}

/* Fills a little more than 4 MiB with 64-byte blocks, then prints how many
 * SuperSlabs hold them and the huge page kB (transparent and reserved) of
 * the mappings that hold those SuperSlabs; then frees all but every
 * 16384th block (each SuperSlab keeps one or two, the rest of its slabs
 * are free), lets the decay clock (HAKMEM_DECAY_MS=1: its bounds last two
 * 64-period epochs) tick for 400 ms, and prints those kB again: a purge of
 * the free slabs would split the huge pages. */
static int
huge_backed (void)
{
  enum { N = 70000, MAX_SS = 64 };
  static void *p[N];
  uintptr_t ss[MAX_SS];
  int nss = 0;
  for (int i = 0; i < N; i++)
    {
      p[i] = T (malloc) (64);
      if (!p[i])
        return 2;
      memset (p[i], 0x5A, 64);
      uintptr_t base = (uintptr_t) p[i] & ~(uintptr_t) (2 * HT_MiB - 1);
      int known = 0;
      for (int k = 0; k < nss; k++)
        known |= ss[k] == base;
      if (!known && nss < MAX_SS)
        ss[nss++] = base;
    }
  unsigned long kb = smaps_kb_over (ss, nss, "AnonHugePages")
                     + smaps_kb_over (ss, nss, "Private_Hugetlb");
  for (int i = 0; i < N; i++)
    if (i % 16384)
      T (free) (p[i]);
  for (int k = 0; k < 200; k++)
    {
      g_usleep (2000);
      void *q[256];
      for (int j = 0; j < 256; j++)
        q[j] = T (malloc) (176);
      for (int j = 0; j < 256; j++)
        T (free) (q[j]);
    }
  unsigned long after = smaps_kb_over (ss, nss, "AnonHugePages")
                        + smaps_kb_over (ss, nss, "Private_Hugetlb");
  printf ("superslabs=%d huge_kb=%lu after_kb=%lu\n", nss, kb, after);
  for (int i = 0; i < N; i += 16384)
    T (free) (p[i]);
  return 0;
}

static int
child_main (const char *mode)
{
  if (!strcmp (mode, "huge-backed"))
    return huge_backed ();
  if (!strcmp (mode, "smoke") || !strcmp (mode, "stats"))
    return smoke ();
  if (!strcmp (mode, "print-config"))
    {
      T (free) (T (malloc) (1));
      hak_print_config ();
      return 0;
    }
  return 99;
}

/* ---- parent side --------------------------------------------------------- */

typedef struct
{
  int status;
  gchar *out;
  gchar *err;
  gchar **lines;  /* stderr split into lines */
} Child;

/* Runs the child with every HAKMEM_* variable removed from the environment,
 * then the NULL-terminated "NAME=value" list added. */
static void
run_child (Child *c, const char *mode, const char *const *env)
{
  gchar *self = g_file_read_link ("/proc/self/exe", NULL);
  gchar **envp = g_get_environ ();
  GError *error = NULL;

  g_assert_nonnull (self);
  for (;;)
    {
      gchar *victim = NULL;
      for (gchar **e = envp; *e; e++)
        if (g_str_has_prefix (*e, "HAKMEM_"))
          {
            victim = g_strndup (*e, (gsize) (strchr (*e, '=') - *e));
            break;
          }
      if (!victim)
        break;
      envp = g_environ_unsetenv (envp, victim);
      g_free (victim);
    }
  for (const char *const *kv = env; kv && *kv; kv++)
    {
      gchar **pair = g_strsplit (*kv, "=", 2);
      envp = g_environ_setenv (envp, pair[0], pair[1], TRUE);
      g_strfreev (pair);
    }

  const gchar *argv[] = { self, "--hakmem-child", mode, NULL };
  if (!g_spawn_sync (NULL, (gchar **) argv, envp, G_SPAWN_DEFAULT, NULL, NULL,
                     &c->out, &c->err, &c->status, &error))
    g_error ("spawning %s: %s", self, error->message);
  c->lines = g_strsplit (c->err, "\n", -1);

  GString *desc = g_string_new (NULL);
  for (const char *const *kv = env; kv && *kv; kv++)
    g_string_append_printf (desc, "%s ", *kv);
  g_test_message ("child %s with %s-> status %d, stderr:\n%s", mode,
                  desc->str, c->status, c->err);
  g_string_free (desc, TRUE);
  g_strfreev (envp);
  g_free (self);
}

static void
child_clear (Child *c)
{
  g_free (c->out);
  g_free (c->err);
  g_strfreev (c->lines);
}

static void
assert_exit_ok (const Child *c)
{
  if (WIFSIGNALED (c->status))
    g_error ("child killed by signal %d; stderr:\n%s", WTERMSIG (c->status), c->err);
  if (!WIFEXITED (c->status) || WEXITSTATUS (c->status) != 0)
    g_error ("child exited with status %d; stderr:\n%s", WEXITSTATUS (c->status),
             c->err);
}

static gboolean
matches (const char *pattern, const char *line)
{
  return g_regex_match_simple (pattern, line, 0, 0);
}

/* The "hakmem: " line about the given option (front, safety). */
static const char *
option_line (const Child *c, const char *option)
{
  gchar *pattern = g_strdup_printf ("^hakmem: .*\\b%s\\b", option);
  const char *found = NULL;
  for (gchar **l = c->lines; *l; l++)
    if (matches (pattern, *l) && !g_strrstr (*l, "warn"))
      {
        found = *l;
        break;
      }
  g_free (pattern);
  if (!found)
    g_error ("no 'hakmem: ... %s ...' line on stderr:\n%s", option, c->err);
  return found;
}

/* The option line names the value and where it came from (env / default). */
static void
assert_option (const Child *c, const char *option, const char *value,
               const char *source)
{
  const char *line = option_line (c, option);
  gchar *v = g_strdup_printf ("\\b%s\\b", value);
  gchar *s = g_strdup_printf ("\\b%s\\b", source);
  if (!matches (v, line) || !matches (s, line))
    g_error ("expected '%s' line to report '%s' from '%s', got: %s", option,
             value, source, line);
  g_free (v);
  g_free (s);
}

static guint
count_lines (const Child *c, const char *substring)
{
  guint n = 0;
  for (gchar **l = c->lines; *l; l++)
    if (strstr (*l, substring))
      n++;
  return n;
}

static void
assert_no_warning (const Child *c)
{
  for (gchar **l = c->lines; *l; l++)
    if (g_regex_match_simple ("warn", *l, G_REGEX_CASELESS, 0))
      g_error ("unexpected warning on stderr: %s", *l);
}

/* A child run with env takes option's value from the environment, with
 * no warning. */
static void
assert_value_taken (const char *const *env, const char *option, const char *value)
{
  Child c;
  run_child (&c, "smoke", env);
  assert_exit_ok (&c);
  assert_option (&c, option, value, "env");
  assert_no_warning (&c);
  child_clear (&c);
}

static void
test_default_quiet (void)
{
  Child c;
  run_child (&c, "smoke", NULL);
  assert_exit_ok (&c);
  if (strstr (c.err, "hakmem") || strstr (c.out, "hakmem"))
    g_error ("hakmem printed something without HAKMEM_VERBOSE/HAKMEM_STATS:\n%s%s",
             c.out, c.err);
  child_clear (&c);
}

static void
test_verbose (void)
{
  const char *env[] = { "HAKMEM_VERBOSE=1", NULL };
  Child c;
  run_child (&c, "smoke", env);
  assert_exit_ok (&c);
  assert_option (&c, "front", HT_DEFAULT_FRONT, "default");
  assert_option (&c, "safety", HT_DEFAULT_SAFETY, "default");
  assert_option (&c, "pool", HT_DEFAULT_POOL, "default");
  assert_no_warning (&c);
  /* Every line it prints is prefixed. */
  for (gchar **l = c.lines; *l; l++)
    if (**l && !g_str_has_prefix (*l, "hakmem: "))
      g_error ("verbose output line without the 'hakmem: ' prefix: %s", *l);
  child_clear (&c);
}

typedef struct
{
  const char *option;   /* front, safety */
  const char *var;      /* HAKMEM_FRONT */
  const char *value;
} Choice;

static void
test_choice (gconstpointer data)
{
  const Choice *ch = data;
  gchar *kv = g_strdup_printf ("%s=%s", ch->var, ch->value);
  const char *env[] = { "HAKMEM_VERBOSE=1", kv, NULL };
  assert_value_taken (env, ch->option, ch->value);
  g_free (kv);
}

/* An unknown value warns once (naming the variable and the value) and the
 * default is used. */
static void
test_bogus (gconstpointer data)
{
  const Choice *ch = data;
  gchar *kv = g_strdup_printf ("%s=%s", ch->var, ch->value);
  const char *env_quiet[] = { kv, NULL };
  const char *env_verbose[] = { kv, "HAKMEM_VERBOSE=1", NULL };
  const char *def = !strcmp (ch->option, "front")       ? HT_DEFAULT_FRONT
                    : !strcmp (ch->option, "safety")    ? HT_DEFAULT_SAFETY
                    : !strcmp (ch->option, "large")     ? HT_DEFAULT_LARGE
                    : !strcmp (ch->option, "superslab") ? HT_DEFAULT_SUPERSLAB
                                                        : HT_DEFAULT_POOL;
  Child c;

  run_child (&c, "smoke", env_quiet);
  assert_exit_ok (&c);
  guint n = count_lines (&c, ch->value);
  if (n != 1)
    g_error ("%s: expected exactly one warning line mentioning '%s', got %u:\n%s",
             kv, ch->value, n, c.err);
  for (gchar **l = c.lines; *l; l++)
    if (strstr (*l, ch->value) && (!strstr (*l, ch->var) || !strstr (*l, "is not valid")))
      g_error ("warning does not name %s or does not say the value is not valid: %s",
               ch->var, *l);
  child_clear (&c);

  run_child (&c, "smoke", env_verbose);
  assert_exit_ok (&c);
  assert_option (&c, ch->option, def, "default");
  child_clear (&c);
  g_free (kv);
}

typedef struct
{
  Choice choice;
  const char *off;       /* the build option that left it out */
  const char *fallback;  /* the box used instead */
} NotBuilt;

/* A box implementation hakmem has but this build left out: one line on
 * stderr that names the variable and the value, says it is not in this
 * build and which option left it out, and names the default used. */
static void
test_not_built (gconstpointer data)
{
  const NotBuilt *nb = data;
  const Choice *ch = &nb->choice;
  gchar *kv = g_strdup_printf ("%s=%s", ch->var, ch->value);
  const char *env_quiet[] = { kv, NULL };
  const char *env_verbose[] = { kv, "HAKMEM_VERBOSE=1", NULL };
  const char *def = nb->fallback;
  gchar *expected = g_strdup_printf ("hakmem: %s: not in this build (built with %s); using %s",
                                     kv, nb->off, def);
  Child c;

  run_child (&c, "smoke", env_quiet);
  assert_exit_ok (&c);
  if (count_lines (&c, ch->value) != 1 || count_lines (&c, expected) != 1)
    g_error ("%s: expected exactly one line '%s', got:\n%s", kv, expected, c.err);
  child_clear (&c);

  run_child (&c, "smoke", env_verbose);
  assert_exit_ok (&c);
  assert_option (&c, ch->option, def, "default");
  child_clear (&c);
  g_free (expected);
  g_free (kv);
}

static void
test_two_bogus (void)
{
  const char *env[] = { "HAKMEM_FRONT=frontbogus", "HAKMEM_SAFETY=safetybogus",
                        "HAKMEM_POOL=poolbogus", NULL };
  Child c;
  run_child (&c, "smoke", env);
  assert_exit_ok (&c);
  g_assert_cmpuint (count_lines (&c, "frontbogus"), ==, 1);
  g_assert_cmpuint (count_lines (&c, "safetybogus"), ==, 1);
  g_assert_cmpuint (count_lines (&c, "poolbogus"), ==, 1);
  child_clear (&c);
}

/* The decay period is compared as a 32-bit difference of milliseconds:
 * the largest valid value is accepted; one past it is refused with a
 * warning that says the range, and the default stays (3000000000 would
 * read as negative and tick on every miss). */
static void
test_decay_ms_range (void)
{
  const char *largest[] = { "HAKMEM_VERBOSE=1", "HAKMEM_DECAY_MS=2147483647", NULL };
  const char *too_large[] = { "HAKMEM_VERBOSE=1", "HAKMEM_DECAY_MS=2147483648", NULL };
  assert_value_taken (largest, "decay_ms", "2147483647");

  Child c;
  run_child (&c, "smoke", too_large);
  assert_exit_ok (&c);
  assert_option (&c, "decay_ms", "20", "default");
  g_assert_cmpuint (count_lines (&c, "HAKMEM_DECAY_MS=2147483648"), ==, 1);
  g_assert_cmpuint (count_lines (&c, "from 0 to 2147483647"), ==, 1);
  child_clear (&c);
}

/* A number option takes decimal digits and nothing else; anything else,
 * or a value past what a long holds, is refused with a warning naming the
 * variable, and the default stays. Leading zeros are fine. */
static void
test_number_values (void)
{
  static const char *refused[] = { "HAKMEM_SS_CACHE=12x", "HAKMEM_SS_CACHE=-1",
                                   "HAKMEM_SS_CACHE=", "HAKMEM_SS_CACHE= 8",
                                   "HAKMEM_SS_CACHE=99999999999999999999999" };
  for (gsize i = 0; i < G_N_ELEMENTS (refused); i++)
    {
      const char *env[] = { "HAKMEM_VERBOSE=1", refused[i], NULL };
      Child c;
      run_child (&c, "smoke", env);
      assert_exit_ok (&c);
      assert_option (&c, "ss_cache", "8", "default");
      if (count_lines (&c, refused[i]) != 1 || count_lines (&c, "decimal digits only") != 1)
        g_error ("%s: expected one warning naming it and saying decimal digits only, got:\n%s",
                 refused[i], c.err);
      child_clear (&c);
    }
  const char *padded[] = { "HAKMEM_VERBOSE=1", "HAKMEM_SS_CACHE=0012", NULL };
  assert_value_taken (padded, "ss_cache", "12");
}

/* A boolean option takes 1, 0, yes, no, true, false, on and off in any
 * case; anything else, the empty value included, is refused with a
 * warning that names the variable and lists what it takes, and the
 * default stays. */
static void
test_bool_values (void)
{
  static const char *on[] = { "1", "yes", "true", "on", "YES", "True", "oN" };
  static const char *off[] = { "0", "no", "false", "off", "NO", "False", "OFF" };
  for (gsize i = 0; i < G_N_ELEMENTS (on); i++)
    {
      gchar *kv = g_strdup_printf ("HAKMEM_VERBOSE=%s", on[i]);
      const char *env[] = { kv, NULL };
      assert_value_taken (env, "verbose", "1");
      g_free (kv);
    }
  for (gsize i = 0; i < G_N_ELEMENTS (off); i++)
    {
      gchar *kv = g_strdup_printf ("HAKMEM_TAG_WINDOW=%s", off[i]);
      const char *env[] = { "HAKMEM_VERBOSE=1", kv, NULL };
      assert_value_taken (env, "tag_window", "0");
      g_free (kv);
    }
  static const char *refused[] = { "HAKMEM_TAG_WINDOW=", "HAKMEM_TAG_WINDOW=2",
                                   "HAKMEM_TAG_WINDOW=maybe", "HAKMEM_TAG_WINDOW= no",
                                   "HAKMEM_TAG_WINDOW=offf", "HAKMEM_TAG_WINDOW=n" };
  for (gsize i = 0; i < G_N_ELEMENTS (refused); i++)
    {
      const char *env[] = { "HAKMEM_VERBOSE=1", refused[i], NULL };
      Child c;
      run_child (&c, "smoke", env);
      assert_exit_ok (&c);
      assert_option (&c, "tag_window", "1", "default");
      gchar *warning = g_strdup_printf ("hakmem: warning: %s is not valid (expected 1, 0, yes, no, "
                                        "true, false, on or off, in any case); using 1", refused[i]);
      if (count_lines (&c, warning) != 1)
        g_error ("%s: expected one line '%s', got:\n%s", refused[i], warning, c.err);
      g_free (warning);
      child_clear (&c);
    }
}

static void
test_stats (void)
{
  const char *env[] = { "HAKMEM_STATS=1", NULL };
  Child c;
  run_child (&c, "stats", env);
  assert_exit_ok (&c);
  if (!strstr (c.err, "hakmem") && !strstr (c.out, "hakmem"))
    g_error ("HAKMEM_STATS=1 printed nothing about hakmem at exit");
  child_clear (&c);
}

static void
test_print_config (void)
{
  const char *env[] = { "HAKMEM_FRONT=none", NULL };
  Child c;
  run_child (&c, "print-config", env);
  assert_exit_ok (&c);
  assert_option (&c, "front", "none", "env");
  assert_option (&c, "safety", HT_DEFAULT_SAFETY, "default");
  child_clear (&c);
}

/* Every front x safety x pool combination works and is reported. */
static void
test_combinations (void)
{
  const char *fronts[] = { "tcache", "none" };
  const char *safeties[] = { "registry", "mincore" };
  const char *pools[] = { "tls", "none" };

  for (size_t i = 0; i < G_N_ELEMENTS (fronts); i++)
    for (size_t j = 0; j < G_N_ELEMENTS (safeties); j++)
      for (size_t k = 0; k < G_N_ELEMENTS (pools); k++)
        {
          if (!HT_MINCORE_ENABLED && !strcmp (safeties[j], "mincore"))
            continue;
          if (!HT_POOL_ENABLED && !strcmp (pools[k], "tls"))
            continue;
          gchar *f = g_strdup_printf ("HAKMEM_FRONT=%s", fronts[i]);
          gchar *s = g_strdup_printf ("HAKMEM_SAFETY=%s", safeties[j]);
          gchar *p = g_strdup_printf ("HAKMEM_POOL=%s", pools[k]);
          const char *env[] = { "HAKMEM_VERBOSE=1", f, s, p, NULL };
          Child c;
          run_child (&c, "smoke", env);
          assert_exit_ok (&c);
          assert_option (&c, "front", fronts[i], "env");
          assert_option (&c, "safety", safeties[j], "env");
          assert_option (&c, "pool", pools[k], "env");
          child_clear (&c);
          g_free (f);
          g_free (s);
          g_free (p);
        }
}

/* What the system offers the hugepage box: transparent huge pages
 * ("always" or "madvise" chosen) and free reserved 2 MiB pages. */
static gboolean
system_thp (void)
{
  gchar *text = NULL;
  gboolean on = g_file_get_contents ("/sys/kernel/mm/transparent_hugepage/enabled",
                                     &text, NULL, NULL)
                && (strstr (text, "[always]") || strstr (text, "[madvise]"));
  g_free (text);
  return on;
}

static gboolean
system_thp_madvise_only (void)
{
  gchar *text = NULL;
  gboolean on = g_file_get_contents ("/sys/kernel/mm/transparent_hugepage/enabled",
                                     &text, NULL, NULL)
                && strstr (text, "[madvise]");
  g_free (text);
  return on;
}

static long
system_reserved_free (void)
{
  gchar *text = NULL;
  long n = 0;
  if (g_file_get_contents ("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
                           &text, NULL, NULL))
    n = strtol (text, NULL, 10);
  g_free (text);
  return n;
}

/* The child's "superslabs=K huge_kb=N after_kb=M" line. */
static void
parse_huge (const Child *c, int *nss, unsigned long *kb, unsigned long *after)
{
  if (sscanf (c->out, "superslabs=%d huge_kb=%lu after_kb=%lu", nss, kb, after) != 3)
    g_error ("no 'superslabs=K huge_kb=N after_kb=M' line from the child: %s", c->out);
  g_assert_cmpint (*nss, >=, 2);   /* 4 MiB of blocks span more than one */
}

/* HAKMEM_SUPERSLAB=hugepage: every SuperSlab a program touched is a huge
 * page, as /proc/self/smaps counts them, and stays one when most of its
 * blocks are freed and the decay clock runs (nothing splits it);
 * HAKMEM_VERBOSE says which kind; where the system offers none, one warning line says so and the
 * program runs on normal pages. With THP in `madvise` mode and no reserve,
 * the default box's SuperSlabs are not huge pages: the box made them so. */
static void
test_hugepage_backed (void)
{
  const char *env[] = { "HAKMEM_SUPERSLAB=hugepage", "HAKMEM_VERBOSE=1", "HAKMEM_DECAY_MS=1", NULL };
  gboolean thp = system_thp ();
  long reserved = system_reserved_free ();
  Child c;
  int nss;
  unsigned long kb, after;

  run_child (&c, "huge-backed", env);
  assert_exit_ok (&c);
  assert_option (&c, "superslab", "hugepage", "env");
  if (!thp && reserved <= 0)
    {
      if (count_lines (&c, "warning") != 1
          || count_lines (&c, "HAKMEM_SUPERSLAB=hugepage: the system offers no huge pages") != 1)
        g_error ("expected one warning that the system offers no huge pages:\n%s", c.err);
      child_clear (&c);
      g_test_skip ("the system has transparent huge pages `never` and no reserved 2 MiB pages: "
                   "nothing to back SuperSlabs with (the warning was checked)");
      return;
    }
  assert_no_warning (&c);
  g_assert_cmpuint (count_lines (&c, reserved > 0 ? "hakmem: hugepage box: reserved 2 MiB pages"
                                                  : "hakmem: hugepage box: transparent huge pages"),
                    ==, 1);
  parse_huge (&c, &nss, &kb, &after);
  if (kb < 2048ul * (unsigned long) nss)
    g_error ("%d SuperSlabs touched but only %lu kB of huge pages in their mappings", nss, kb);
  if (after < 2048ul * (unsigned long) nss)
    g_error ("%d SuperSlabs still in use but only %lu kB of huge pages left in their mappings "
             "after most of their blocks were freed (split by a purge?)", nss, after);
  child_clear (&c);

  if (system_thp_madvise_only () && reserved <= 0)
    {
      const char *pages[] = { "HAKMEM_SUPERSLAB=pages", "HAKMEM_DECAY_MS=1", NULL };
      run_child (&c, "huge-backed", pages);
      assert_exit_ok (&c);
      parse_huge (&c, &nss, &kb, &after);
      g_assert_cmpuint (kb, ==, 0);
      child_clear (&c);
    }
}

static const Choice superslab_pages = { "superslab", "HAKMEM_SUPERSLAB", "pages" };
static const Choice superslab_bogus = { "superslab", "HAKMEM_SUPERSLAB", "bogus" };
static const Choice front_tcache = { "front", "HAKMEM_FRONT", "tcache" };
static const Choice front_none = { "front", "HAKMEM_FRONT", "none" };
static const Choice safety_registry = { "safety", "HAKMEM_SAFETY", "registry" };
static const Choice safety_none = { "safety", "HAKMEM_SAFETY", "none" };
static const Choice safety_mincore = { "safety", "HAKMEM_SAFETY", "mincore" };
static const Choice pool_tls = { "pool", "HAKMEM_POOL", "tls" };
static const Choice pool_none = { "pool", "HAKMEM_POOL", "none" };
static const Choice pool_bogus = { "pool", "HAKMEM_POOL", "bogus" };
static const Choice large_cached = { "large", "HAKMEM_LARGE", "cached" };
static const Choice large_direct = { "large", "HAKMEM_LARGE", "direct" };
static const Choice large_bogus = { "large", "HAKMEM_LARGE", "bogus" };
static const NotBuilt mincore_not_built = {
  { "safety", "HAKMEM_SAFETY", "mincore" }, "-Dmincore=off", HT_DEFAULT_SAFETY
};
static const NotBuilt pool_tls_not_built = { { "pool", "HAKMEM_POOL", "tls" }, "-Dpool=off", "none" };
static const NotBuilt hugepage_not_built = {
  { "superslab", "HAKMEM_SUPERSLAB", "hugepage" }, "-Dhugepage=off", "pages"
};
static const NotBuilt large_direct_not_built = {
  { "large", "HAKMEM_LARGE", "direct" }, "-Ddirect=off", "cached"
};
static const Choice front_bogus = { "front", "HAKMEM_FRONT", "bogus" };
static const Choice safety_bogus = { "safety", "HAKMEM_SAFETY", "bogus" };

int
main (int argc, char **argv)
{
  if (argc == 3 && !strcmp (argv[1], "--hakmem-child"))
    return child_main (argv[2]);

  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/config/default-quiet", test_default_quiet);
  g_test_add_func ("/config/verbose", test_verbose);
  g_test_add_data_func ("/config/front/tcache", &front_tcache, test_choice);
  g_test_add_data_func ("/config/front/none", &front_none, test_choice);
  g_test_add_data_func ("/config/safety/registry", &safety_registry, test_choice);
  /* There is no unchecked safety box: "none" is refused like any unknown value. */
  g_test_add_data_func ("/config/safety/none-refused", &safety_none, test_bogus);
  if (HT_MINCORE_ENABLED)
    g_test_add_data_func ("/config/safety/mincore", &safety_mincore, test_choice);
  else
    g_test_add_data_func ("/config/safety/mincore-not-built", &mincore_not_built,
                          test_not_built);
  if (HT_POOL_ENABLED)
    g_test_add_data_func ("/config/pool/tls", &pool_tls, test_choice);
  else
    g_test_add_data_func ("/config/pool/tls-not-built", &pool_tls_not_built,
                          test_not_built);
  g_test_add_data_func ("/config/pool/none", &pool_none, test_choice);
  g_test_add_data_func ("/config/large/cached", &large_cached, test_choice);
  if (HT_LARGE_DIRECT_ENABLED)
    g_test_add_data_func ("/config/large/direct", &large_direct, test_choice);
  else
    g_test_add_data_func ("/config/large/direct-not-built", &large_direct_not_built,
                          test_not_built);
  g_test_add_data_func ("/config/bogus/large", &large_bogus, test_bogus);
  g_test_add_data_func ("/config/superslab/pages", &superslab_pages, test_choice);
  if (HT_HUGEPAGE_ENABLED)
    g_test_add_func ("/config/superslab/hugepage-backed", test_hugepage_backed);
  else
    g_test_add_data_func ("/config/superslab/hugepage-not-built", &hugepage_not_built,
                          test_not_built);
  g_test_add_data_func ("/config/bogus/superslab", &superslab_bogus, test_bogus);
  g_test_add_data_func ("/config/bogus/front", &front_bogus, test_bogus);
  g_test_add_data_func ("/config/bogus/pool", &pool_bogus, test_bogus);
  g_test_add_data_func ("/config/bogus/safety", &safety_bogus, test_bogus);
  g_test_add_func ("/config/bogus/both", test_two_bogus);
  g_test_add_func ("/config/decay-ms-range", test_decay_ms_range);
  g_test_add_func ("/config/number-values", test_number_values);
  g_test_add_func ("/config/bool-values", test_bool_values);
  g_test_add_func ("/config/stats", test_stats);
  g_test_add_func ("/config/print-config", test_print_config);
  g_test_add_func ("/config/combinations", test_combinations);

  return g_test_run ();
}
