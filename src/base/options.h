/* Every run-time option in one table: name, environment variable, default,
 * meaning. The environment is scanned once, at init, from `environ`; nothing
 * on a hot path ever looks at it again. */
#ifndef HAK_OPTIONS_H
#define HAK_OPTIONS_H

#include "base/common.h"
#include "base/box.h"

#include <stdarg.h>

enum hak_option_id {
    HAK_OPT_FRONT,
    HAK_OPT_POOL,
    HAK_OPT_SAFETY,
    HAK_OPT_LARGE,
    HAK_OPT_SUPERSLAB,
    HAK_OPT_ON_ERROR,
    HAK_OPT_VERBOSE,
    HAK_OPT_STATS,
    HAK_OPT_STATS_FILE,
    HAK_OPT_SS_CACHE,
    HAK_OPT_LARGE_CACHE_MB,
    HAK_OPT_DECAY_MS,
    HAK_OPT_TAG_WINDOW,
    HAK_OPT_QUARANTINE_KB,
    HAK_OPT_COUNT
};

/* HAK_OPT_BOX: the choice of a box's implementation, by name from its
 * table (base/box.h); value is the index of the chosen entry.
 * HAK_OPT_PATH: a file name, kept in text (value: 1 when one is given). */
enum hak_option_kind { HAK_OPT_CHOICE, HAK_OPT_BOOL, HAK_OPT_NUMBER, HAK_OPT_BOX, HAK_OPT_PATH };

struct hak_option {
    const char *name;          /* short name, e.g. "front" */
    const char *env;           /* HAKMEM_FRONT */
    enum hak_option_kind kind;
    const char *choices[4];    /* for HAK_OPT_CHOICE, NULL-terminated */
    const char *default_value;
    const char *meaning;
    /* resolved at init */
    long value;                /* choice index, 0/1, or the number */
    const char *source;        /* "default", "env", "build" */
    long max;                  /* for HAK_OPT_NUMBER: the largest valid value; 0 = none */
    const struct hak_box_impl *impls;   /* for HAK_OPT_BOX: the box's table */
    const char *text;          /* for HAK_OPT_PATH: the path (a copy of the environment's) */
};

/* The longest path a HAK_OPT_PATH option takes, NUL included. */
#define HAK_OPT_PATH_MAX 1024

/* What a boolean option accepts, for warnings. */
#define HAK_OPT_BOOL_VALUES "1, 0, yes, no, true, false, on or off, in any case"

HAK_DATA struct hak_option hak_options[HAK_OPT_COUNT];

/* Scans envp once and resolves every option; warns (one line on stderr) about
 * unknown HAKMEM_* names and bad values, and says so (one line) when a box
 * implementation is named that this build left out: these keep the
 * default. The box options' tables are attached first (hak_boxes_attach,
 * api/init.h). */
void hak_options_init(char **envp);
void hak_options_print(void);

static inline long hak_opt(enum hak_option_id id) { return hak_options[id].value; }
/* A HAK_OPT_PATH option's text ("" when not given). */
static inline const char *hak_opt_text(enum hak_option_id id) { return hak_options[id].text; }
static inline const char *hak_opt_choice(enum hak_option_id id) {
    const struct hak_option *o = &hak_options[id];
    return o->kind == HAK_OPT_BOX ? o->impls[o->value].name : o->choices[o->value];
}
/* The ops table of the implementation chosen for a HAK_OPT_BOX option. */
static inline const void *hak_opt_box(enum hak_option_id id) {
    return hak_options[id].impls[hak_options[id].value].ops;
}

/* Writes a message to stderr with write(2): safe inside the allocator. */
void hak_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same to descriptor fd (stderr when fd < 0). */
void hak_vlog_fd(int fd, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#endif
