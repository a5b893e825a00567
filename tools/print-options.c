/* Renders hakmem's option table (src/base/options.c) into the docs, so
 * that they cannot drift from the code: a compact Markdown table for the
 * README (name, values, default, one line), and the full text of every
 * option for the man page hakmem(3), between marker lines in each file.
 * The format follows the file: roff for a name ending in ".3", Markdown
 * otherwise.
 *
 *   print-options               print the README table
 *   print-options --man         print the man page's option list
 *   print-options --check F     exit 1 unless F holds its text between the markers
 *   print-options --write F     replace the text between the markers in F
 *   print-options --names F     exit 1 unless every HAKMEM_* option is named in F */
#include "api/init.h"
#include "base/options.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One line for the README's table. The man page carries the full text
 * (the table's `meaning`); an option missing here shows its meaning up to
 * the first ';' or ':' instead, and an entry for an option this tree does
 * not have is not used. Kept out of options.c so that the library does
 * not carry it. */
static const struct { const char *env, *summary; } summaries[] = {
    { "HAKMEM_FRONT", "front cache for tiny sizes (up to 1040 B); none = no per-thread bins" },
    { "HAKMEM_POOL", "Pool TLS cache for mid sizes (1041 B-256 KiB); none = no per-thread bins" },
    { "HAKMEM_SAFETY", "how free and realloc check their pointer (hakmem(3), docs/DESIGN.md)" },
    { "HAKMEM_LARGE", "blocks above 256 KiB: cached = freed spans reused; direct = unmapped at free" },
    { "HAKMEM_SUPERSLAB", "pages = normal pages; hugepage = a 2 MiB page per SuperSlab" },
    { "HAKMEM_ON_ERROR", "what a bad free or realloc does" },
    { "HAKMEM_VERBOSE", "print the resolved configuration at start-up" },
    { "HAKMEM_STATS", "print the allocator's counters at exit" },
    { "HAKMEM_STATS_FILE", "append the counters to this file instead (%p: the pid)" },
    { "HAKMEM_SS_CACHE", "empty 2 MiB SuperSlabs kept ready for reuse" },
    { "HAKMEM_LARGE_CACHE_MB", "MiB of freed large spans kept (or a quarter of those in use)" },
    { "HAKMEM_DECAY_MS", "free memory idle this long goes back to the OS; 0 = no clock" },
    { "HAKMEM_TAG_WINDOW", "0 = every small free through the chunk map (testing)" },
    { "HAKMEM_QUARANTINE_KB", "HAKMEM_SAFETY=hardened: KiB of freed blocks a thread keeps out of use (beyond 4 threads, 4 times this shared)" },
};

static char buf[32768];
static size_t used;

static void put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void put(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, sizeof buf - used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf - used) {
        fprintf(stderr, "print-options: text too long\n");
        exit(2);
    }
    used += (size_t)n;
}

static const char *summary_of(const struct hak_option *o) {
    for (size_t i = 0; i < sizeof summaries / sizeof summaries[0]; i++)
        if (!strcmp(summaries[i].env, o->env)) return summaries[i].summary;
    static char cut[256];
    snprintf(cut, sizeof cut, "%s", o->meaning);
    cut[strcspn(cut, ";:")] = 0;
    return cut;
}

/* The values an option takes, each as pre name post, separated by sep. */
static void put_values(const struct hak_option *o, const char *pre, const char *post, const char *sep) {
    if (o->kind == HAK_OPT_CHOICE) {
        for (int c = 0; c < 4 && o->choices[c]; c++) put("%s%s%s%s", c ? sep : "", pre, o->choices[c], post);
    } else if (o->kind == HAK_OPT_BOX) {
        /* every implementation, built in this build or not */
        for (int c = 0; o->impls[c].name; c++) put("%s%s%s%s", c ? sep : "", pre, o->impls[c].name, post);
    } else if (o->kind == HAK_OPT_BOOL) {
        put("%s1%s%s%s0%s", pre, post, sep, pre, post);
    } else {
        put(o->kind == HAK_OPT_PATH ? "a path" : "a number");
    }
}

static const char *render_markdown(void) {
    used = 0;
    put("| variable | values | default | what it sets |\n|---|---|---|---|\n");
    for (int i = 0; i < HAK_OPT_COUNT; i++) {
        const struct hak_option *o = &hak_options[i];
        put("| `%s` | ", o->env);
        put_values(o, "`", "`", ", ");
        put(*o->default_value ? " | `%s` | %s |\n" : " | none%s | %s |\n", o->default_value, summary_of(o));
    }
    return buf;
}

/* Text for a roff line, as a sentence: backslashes escaped, and a leading
 * '.' or '\'' kept from being read as a request. */
static void put_roff_text(const char *s) {
    if (*s == '.' || *s == '\'') put("\\&");
    if (*s >= 'a' && *s <= 'z') put("%c", *s++ - 'a' + 'A');   /* a sentence */
    for (; *s; s++) {
        if (*s == '\\') put("\\e");
        else put("%c", *s);
    }
}

static const char *render_man(void) {
    used = 0;
    for (int i = 0; i < HAK_OPT_COUNT; i++) {
        const struct hak_option *o = &hak_options[i];
        put(".TP\n.B %s\n", o->env);
        put_values(o, "\\fB", "\\fR", ", ");
        if (o->kind == HAK_OPT_BOOL) put(" (or yes, no, true, false, on, off, in any case)");
        put(*o->default_value ? "; default \\fB%s\\fR.\n" : "; not set by default.%s\n", o->default_value);
        if (o->kind == HAK_OPT_BOX) {
            for (int c = 0; o->impls[c].name; c++)
                if (o->impls[c].option)
                    put("\\fB%s\\fR is built unless the library was configured with \\fB\\-D%s=off\\fR.\n",
                        o->impls[c].name, o->impls[c].option);
        }
        put(".br\n");
        put_roff_text(o->meaning);
        put(".\n");
    }
    return buf;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    rewind(f);
    char *s = malloc((size_t)sz + 1);
    if (!s || fread(s, 1, (size_t)sz, f) != (size_t)sz) { perror(path); exit(2); }
    s[sz] = 0;
    fclose(f);
    *len = (size_t)sz;
    return s;
}

static int is_man_page(const char *path) {
    size_t n = strlen(path);
    return n > 2 && !strcmp(path + n - 2, ".3");
}

/* Every option's variable appears in the file (a word of its own). */
static int check_names(const char *path) {
    size_t len;
    char *text = slurp(path, &len);
    int missing = 0;
    for (int i = 0; i < HAK_OPT_COUNT; i++) {
        const char *env = hak_options[i].env, *p = text;
        size_t n = strlen(env);
        int found = 0;
        while (!found && (p = strstr(p, env)) != NULL) {
            char next = p[n];
            found = !(next == '_' || (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9'));
            p += n;
        }
        if (!found) {
            fprintf(stderr, "%s: %s is not described\n", path, env);
            missing = 1;
        }
    }
    free(text);
    return missing;
}

int main(int argc, char **argv) {
    hak_boxes_attach();
    hak_options_init(NULL);
    if (argc == 1) { fputs(render_markdown(), stdout); return 0; }
    if (argc == 2 && !strcmp(argv[1], "--man")) { fputs(render_man(), stdout); return 0; }
    if (argc == 3 && !strcmp(argv[1], "--names")) return check_names(argv[2]);
    if (argc != 3 || (strcmp(argv[1], "--check") && strcmp(argv[1], "--write"))) {
        fprintf(stderr, "usage: print-options [--man | --check FILE | --write FILE | --names FILE]\n");
        return 2;
    }
    int man = is_man_page(argv[2]);
    const char *begin = man ? ".\\\" options:begin\n" : "<!-- options:begin -->\n";
    const char *end = man ? ".\\\" options:end" : "<!-- options:end -->";
    const char *table = man ? render_man() : render_markdown();
    size_t len;
    char *text = slurp(argv[2], &len);
    char *b = strstr(text, begin), *e = b ? strstr(b, end) : NULL;
    if (!b || !e) { fprintf(stderr, "%s: option table markers not found\n", argv[2]); return 1; }
    b += strlen(begin);
    if (!strcmp(argv[1], "--check")) {
        int same = (size_t)(e - b) == strlen(table) && !memcmp(b, table, strlen(table));
        if (same) { free(text); return 0; }
        fprintf(stderr, "%s: option table is stale; run print-options --write %s\nexpected:\n%s",
                argv[2], argv[2], table);
        return 1;
    }
    FILE *f = fopen(argv[2], "wb");
    if (!f) { perror(argv[2]); return 2; }
    fwrite(text, 1, (size_t)(b - text), f);
    fputs(table, f);
    fputs(e, f);
    fclose(f);
    free(text);
    return 0;
}
