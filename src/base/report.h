/* Where the HAKMEM_STATS report goes: a descriptor of hakmem's own, taken
 * at init, so the report reaches the user whatever the program does to its
 * standard streams before exit (coreutils close stdout and stderr in an
 * atexit handler, which runs before a library's destructors). */
#ifndef HAK_REPORT_H
#define HAK_REPORT_H

/* 1 when the report is to be printed at exit (HAKMEM_STATS=1 or
 * HAKMEM_STATS_FILE set); resolved at init. */
int hak_report_wanted(void);
/* At init, when the report is wanted: a copy of stderr, or
 * HAKMEM_STATS_FILE opened for appending (%p = the process id). Makes no
 * call to malloc. */
void hak_report_open(void);
/* The descriptor the report is written to (-1: stderr itself). A forked
 * child whose file name holds %p gets a file of its own here. */
int hak_report_fd(void);

#endif
