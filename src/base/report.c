#include "base/report.h"
#include "base/options.h"
#include "os/os.h"

#include <stdio.h>
#include <string.h>

static int report_fd = -1;
static int report_pid;     /* the process report_fd was opened for */
static int per_process;    /* the file name holds %p */

int hak_report_wanted(void) {
    return hak_opt(HAK_OPT_STATS) || hak_opt(HAK_OPT_STATS_FILE);
}

/* The file name with each %p replaced by pid; 0 when it does not fit. */
static int expand_path(const char *path, int pid, char *out, size_t len) {
    size_t n = 0;
    for (const char *c = path; *c; c++) {
        int w;
        if (c[0] == '%' && c[1] == 'p') {
            w = snprintf(out + n, len - n, "%d", pid);
            c++;
        } else {
            w = snprintf(out + n, len - n, "%c", *c);
        }
        if (w < 0 || (size_t)w >= len - n) return 0;
        n += (size_t)w;
    }
    out[n] = 0;
    return 1;
}

static void open_for(int pid) {
    const char *path = hak_opt_text(HAK_OPT_STATS_FILE);
    report_pid = pid;
    if (!*path) {
        report_fd = hak_os_report_fd(NULL);
        return;
    }
    char name[HAK_OPT_PATH_MAX + 64];
    if (expand_path(path, pid, name, sizeof name) && (report_fd = hak_os_report_fd(name)) >= 0) return;
    hak_log("hakmem: warning: HAKMEM_STATS_FILE=%s cannot be opened for appending; the report goes "
            "to stderr\n", path);
    report_fd = hak_os_report_fd(NULL);
}

void hak_report_open(void) {
    if (!hak_report_wanted()) return;
    per_process = strstr(hak_opt_text(HAK_OPT_STATS_FILE), "%p") != NULL;
    open_for(hak_os_getpid());
}

int hak_report_fd(void) {
    if (per_process && report_pid != hak_os_getpid()) {
        if (report_fd >= 0) hak_os_close(report_fd);
        report_fd = -1;
        open_for(hak_os_getpid());
    }
    return report_fd;
}
