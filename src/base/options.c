#include "base/options.h"
#include "os/os.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

struct hak_option hak_options[HAK_OPT_COUNT] = {
    [HAK_OPT_FRONT] = { "front", "HAKMEM_FRONT", HAK_OPT_BOX, { 0 }, HAKMEM_DEFAULT_FRONT,
        "front cache box for tiny sizes (<= 1040 B): tcache = per-thread bins; none = every tiny call goes to the SuperSlab pool", 0, 0 },
    [HAK_OPT_POOL] = { "pool", "HAKMEM_POOL", HAK_OPT_BOX, { 0 }, HAKMEM_DEFAULT_POOL,
        "Pool TLS box for mid sizes (1041 B-256 KiB): tls = per-thread bins over per-thread runs; none = every mid call goes to the SuperSlab pool", 0, 0 },
    [HAK_OPT_SAFETY] = { "safety", "HAKMEM_SAFETY", HAK_OPT_BOX, { 0 }, HAKMEM_DEFAULT_SAFETY,
        "safety box: registry = O(1) chunk map + block checks; mincore = mincore(2) + header magic (seed design, A/B only); hardened = registry + canaries, guard pages, keyed free-list links, quarantine (HAKMEM_QUARANTINE_KB) and random block order (every call takes the slow path)", 0, 0 },
    [HAK_OPT_LARGE] = { "large", "HAKMEM_LARGE", HAK_OPT_BOX, { 0 }, HAKMEM_DEFAULT_LARGE,
        "large path (> 256 KiB): cached = freed spans kept for reuse (HAKMEM_LARGE_CACHE_MB) and given back on the clock; direct = every block its own mapping, unmapped at free, resized by mremap (least memory, a map and an unmap per block)", 0, 0 },
    [HAK_OPT_SUPERSLAB] = { "superslab", "HAKMEM_SUPERSLAB", HAK_OPT_BOX, { 0 }, HAKMEM_DEFAULT_SUPERSLAB,
        "SuperSlab box (the 2 MiB chunks small and mid blocks live in): pages = normal pages, free slabs returned 64 KiB at a time; hugepage = each SuperSlab one 2 MiB page (reserved huge pages, else transparent ones), fewer TLB misses and page faults on big heaps, but pages return only with whole SuperSlabs, so a fragmented heap stays larger: for programs with hundreds of MiB of small blocks that live long (see docs/PERFORMANCE.md)", 0, 0 },
    [HAK_OPT_ON_ERROR] = { "on_error", "HAKMEM_ON_ERROR", HAK_OPT_CHOICE,
        { "abort", "warn", "ignore" }, "abort",
        "what an invalid free/realloc does: abort = report and abort; warn = report, ignore the call; ignore = ignore silently", 0, 0 },
    [HAK_OPT_VERBOSE] = { "verbose", "HAKMEM_VERBOSE", HAK_OPT_BOOL, { 0 }, "0",
        "print the resolved configuration to stderr at start-up", 0, 0 },
    [HAK_OPT_STATS] = { "stats", "HAKMEM_STATS", HAK_OPT_BOOL, { 0 }, "0",
        "print allocator counters at exit, to stderr as it was at start-up (a copy of it is kept, so a program that closes its stderr before exit still has the report printed) or to HAKMEM_STATS_FILE", 0, 0 },
    [HAK_OPT_STATS_FILE] = { "stats_file", "HAKMEM_STATS_FILE", HAK_OPT_PATH, { 0 }, "",
        "the file the HAKMEM_STATS report is appended to (created if need be), instead of stderr; setting it turns the report on; %p in it stands for the process id (a forked child writes its own report at its exit, to its own file when %p is used)", 0, 0 },
    [HAK_OPT_SS_CACHE] = { "ss_cache", "HAKMEM_SS_CACHE", HAK_OPT_NUMBER, { 0 }, "8",
        "empty SuperSlabs (2 MiB each) kept ready; beyond that their memory is returned with madvise", 0, 0 },
    [HAK_OPT_LARGE_CACHE_MB] = { "large_cache_mb", "HAKMEM_LARGE_CACHE_MB", HAK_OPT_NUMBER, { 0 }, "64",
        "MiB of freed large spans kept mapped for reuse (a larger one is cut to size for a smaller block), or a quarter of the bytes of large blocks in use when that is more; beyond that they are unmapped", 0, 0 },
    [HAK_OPT_DECAY_MS] = { "decay_ms", "HAKMEM_DECAY_MS", HAK_OPT_NUMBER, { 0 }, "20",
        "pages of slabs and SuperSlabs that stayed free for this many milliseconds, beyond what a heap had in use at its recent high, are returned with madvise, as are those of freed large spans cached for 16 times that, thread caches untouched that long are emptied, and heaps idle that long lend their free blocks; 0 = memory is returned only when the SuperSlab cache overflows (no clock, no 32 MiB bound on free slabs, no hollow runs, cached large spans keep their pages), caches are not emptied, and heaps do not lend", 0, 0,
        /* times are compared as 32-bit differences (hak_os_clock_ms) */
        INT32_MAX },
    [HAK_OPT_TAG_WINDOW] = { "tag_window", "HAKMEM_TAG_WINDOW", HAK_OPT_BOOL, { 0 }, "1",
        "1 = the free hit path finds a block's size class in a table by page over 16 GiB of address space placed at start-up; 0 = every free of a small block is classified through the chunk map, as those of SuperSlabs outside that range are (slower; for testing that path)", 0, 0 },
    [HAK_OPT_QUARANTINE_KB] = { "quarantine_kb", "HAKMEM_QUARANTINE_KB", HAK_OPT_NUMBER, { 0 }, "128",
        "HAKMEM_SAFETY=hardened: KiB of freed small blocks each thread keeps out of use (filled with a pattern that is checked when they leave, so a write after free is reported and a double free found), while at most 4 threads allocate; more share 4 times this; 0 = none", 0, 0,
        (long)1 << 30 },
};

void hak_vlog_fd(int fd, const char *fmt, va_list ap) {
    char buf[512];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    if (fd < 0) hak_os_write_stderr(buf, (size_t)n);
    else hak_os_write_fd(fd, buf, (size_t)n);
}

void hak_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hak_vlog_fd(-1, fmt, ap);
    va_end(ap);
}

/* ASCII only, by hand: strcasecmp reads the locale's tables (see the
 * number case below for why that matters). */
static int same_word(const char *text, const char *word) {
    for (; *text && *word; text++, word++) {
        char c = *text >= 'A' && *text <= 'Z' ? (char)(*text - 'A' + 'a') : *text;
        if (c != *word) return 0;
    }
    return !*text && !*word;
}

/* Returns 1 and stores the parsed value when text is valid for opt; for a
 * box implementation this build left out, stores its index and returns -1. */
static int parse_value(const struct hak_option *opt, const char *text, long *out) {
    switch (opt->kind) {
    case HAK_OPT_BOX:
        for (long i = 0; opt->impls[i].name; i++)
            if (strcmp(text, opt->impls[i].name) == 0) {
                *out = i;
                return opt->impls[i].ops ? 1 : -1;
            }
        return 0;
    case HAK_OPT_CHOICE:
        for (long i = 0; i < 4 && opt->choices[i]; i++)
            if (strcmp(text, opt->choices[i]) == 0) { *out = i; return 1; }
        return 0;
    case HAK_OPT_BOOL:
        /* the spellings shells and other programs' switches use; an empty
         * value is refused like any other, since it says neither */
        for (int i = 0; i < 4; i++) {
            static const char *const yes[] = { "1", "yes", "true", "on" }, *const no[] = { "0", "no", "false", "off" };
            if (same_word(text, yes[i])) { *out = 1; return 1; }
            if (same_word(text, no[i])) { *out = 0; return 1; }
        }
        return 0;
    case HAK_OPT_PATH:   /* must fit where it is kept (keep_text) */
        *out = *text != 0;
        return strlen(text) < HAK_OPT_PATH_MAX;
    case HAK_OPT_NUMBER: {
        /* decimal digits only, by hand: strtol reads the locale's
         * character tables, and that alone made every program that loads
         * hakmem 64-128 KiB larger (the pages of libc it touches) */
        const char *d = text;
        long v = 0;
        for (; *d >= '0' && *d <= '9'; d++) {
            if (v > (LONG_MAX - 9) / 10) return 0;
            v = v * 10 + (*d - '0');
        }
        if (d == text || *d || (opt->max && v > opt->max)) return 0;
        *out = v;
        return 1;
    }
    }
    return 0;
}

/* The text of a path option, copied: the program may change its
 * environment's strings once it runs. */
static const char *keep_text(enum hak_option_id id, const char *text) {
    static HAK_SPARSE char store[HAK_OPT_COUNT][HAK_OPT_PATH_MAX];   /* bss: only a set one is touched */
    memcpy(store[id], text, strlen(text) + 1);
    return store[id];
}

static void describe_choices(const struct hak_option *opt, char *buf, size_t len) {
    buf[0] = 0;
    if (opt->kind == HAK_OPT_BOOL) { snprintf(buf, len, "%s", HAK_OPT_BOOL_VALUES); return; }
    if (opt->kind == HAK_OPT_PATH) { snprintf(buf, len, "a path shorter than %d bytes", HAK_OPT_PATH_MAX); return; }
    if (opt->kind == HAK_OPT_NUMBER) {
        if (opt->max) snprintf(buf, len, "decimal digits only, a number from 0 to %ld", opt->max);
        else snprintf(buf, len, "decimal digits only, a number >= 0");
        return;
    }
    size_t used = 0;
    if (opt->kind == HAK_OPT_BOX) {
        for (int i = 0; opt->impls[i].name; i++)
            if (opt->impls[i].ops)
                used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "|" : "", opt->impls[i].name);
        return;
    }
    for (int i = 0; i < 4 && opt->choices[i]; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "|" : "", opt->choices[i]);
}

void hak_options_init(char **envp) {
    for (int i = 0; i < HAK_OPT_COUNT; i++) {
        struct hak_option *opt = &hak_options[i];
        long v = 0;
        if (parse_value(opt, opt->default_value, &v) != 1) {
            /* build default not compiled in: the first implementation that is */
            v = 0;
            if (opt->kind == HAK_OPT_BOX)
                while (!opt->impls[v].ops) v++;
        }
        opt->value = v;
        opt->source = "default";
        opt->text = opt->kind == HAK_OPT_PATH ? opt->default_value : NULL;
    }
    if (!envp) return;
    for (char **e = envp; *e; e++) {
        if (strncmp(*e, "HAKMEM_", 7) != 0) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        size_t klen = (size_t)(eq - *e);
        struct hak_option *opt = NULL;
        for (int i = 0; i < HAK_OPT_COUNT; i++)
            if (strlen(hak_options[i].env) == klen && !strncmp(*e, hak_options[i].env, klen))
                opt = &hak_options[i];
        if (!opt) {
            hak_log("hakmem: warning: unknown option %.*s ignored\n", (int)klen, *e);
            continue;
        }
        long v;
        int parsed = parse_value(opt, eq + 1, &v);
        if (parsed == 1) {
            opt->value = v;
            opt->source = "env";
            if (opt->kind == HAK_OPT_PATH) opt->text = keep_text((enum hak_option_id)(opt - hak_options), eq + 1);
        } else if (parsed < 0) {
            hak_log("hakmem: %s=%s: not in this build (built with -D%s=off); using %s\n",
                    opt->env, eq + 1, opt->impls[v].option, opt->impls[opt->value].name);
        } else {
            char allowed[128];
            describe_choices(opt, allowed, sizeof allowed);
            hak_log("hakmem: warning: %s=%s is not valid (expected %s); using %s\n",
                    opt->env, eq + 1, allowed,
                    opt->kind == HAK_OPT_BOX ? opt->impls[opt->value].name : opt->default_value);
        }
    }
}

void hak_options_print(void) {
    hak_log("hakmem: version %s\n", HAKMEM_VERSION);
    for (int i = 0; i < HAK_OPT_COUNT; i++) {
        const struct hak_option *o = &hak_options[i];
        if (o->kind == HAK_OPT_PATH)
            hak_log("hakmem: %s = %s (%s%s%s)\n", o->name, *o->text ? o->text : "none", o->source,
                    o->source[0] == 'e' ? " " : "", o->source[0] == 'e' ? o->env : "");
        else if (o->kind == HAK_OPT_CHOICE || o->kind == HAK_OPT_BOX)
            hak_log("hakmem: %s = %s (%s%s%s)\n", o->name, hak_opt_choice((enum hak_option_id)i), o->source,
                    o->source[0] == 'e' ? " " : "", o->source[0] == 'e' ? o->env : "");
        else
            hak_log("hakmem: %s = %ld (%s%s%s)\n", o->name, o->value, o->source,
                    o->source[0] == 'e' ? " " : "", o->source[0] == 'e' ? o->env : "");
    }
}
