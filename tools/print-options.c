/* Renders hakmem's option table (src/base/options.c) as the Markdown table
 * the README shows, so the two cannot drift apart.
 *
 *   print-options             print the table
 *   print-options --check F   exit 1 unless F holds it between the markers
 *   print-options --write F   replace the text between the markers in F */
#include "api/init.h"
#include "base/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BEGIN_MARK "<!-- options:begin -->\n"
#define END_MARK   "<!-- options:end -->"

static char *render(void) {
    static char buf[16384];
    size_t n = 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n,
        "| variable | values | default | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < HAK_OPT_COUNT; i++) {
        const struct hak_option *o = &hak_options[i];
        char values[128] = "";
        if (o->kind == HAK_OPT_CHOICE) {
            size_t v = 0;
            for (int c = 0; c < 4 && o->choices[c]; c++)
                v += (size_t)snprintf(values + v, sizeof values - v, "%s`%s`", c ? ", " : "", o->choices[c]);
        } else if (o->kind == HAK_OPT_BOX) {
            /* every implementation, built in this build or not */
            size_t v = 0;
            for (int c = 0; o->impls[c].name; c++)
                v += (size_t)snprintf(values + v, sizeof values - v, "%s`%s`", c ? ", " : "", o->impls[c].name);
        } else if (o->kind == HAK_OPT_BOOL) {
            /* HAK_OPT_BOOL_VALUES, each word quoted */
            snprintf(values, sizeof values, "`1`, `0`, `yes`, `no`, `true`, `false`, `on`, `off` (any case)");
        } else {
            snprintf(values, sizeof values, o->kind == HAK_OPT_PATH ? "a path" : "decimal digits");
        }
        char def[64];
        snprintf(def, sizeof def, *o->default_value ? "`%s`" : "none", o->default_value);
        n += (size_t)snprintf(buf + n, sizeof buf - n, "| `%s` | %s | %s | %s |\n",
                              o->env, values, def, o->meaning);
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

int main(int argc, char **argv) {
    hak_boxes_attach();
    hak_options_init(NULL);
    const char *table = render();
    if (argc == 1) { fputs(table, stdout); return 0; }
    if (argc != 3 || (strcmp(argv[1], "--check") && strcmp(argv[1], "--write"))) {
        fprintf(stderr, "usage: print-options [--check|--write FILE]\n");
        return 2;
    }
    size_t len;
    char *text = slurp(argv[2], &len);
    char *b = strstr(text, BEGIN_MARK), *e = b ? strstr(b, END_MARK) : NULL;
    if (!b || !e) { fprintf(stderr, "%s: option table markers not found\n", argv[2]); return 1; }
    b += strlen(BEGIN_MARK);
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
