/* What stats-streams.sh runs under a preloaded hakmem with the stats
 * report on:
 *   close   allocates, then closes stdout and stderr before exit (as
 *           coreutils' close_stdout does): the report must still appear
 *   fds     checks hakmem's descriptor for the report: none of the low
 *           numbers taken (the next open gets 3), and the one it holds
 *           (100 or above) closed on exec; prints "ok"
 *   fork    a child allocates and exits, then the parent; prints
 *           "PARENT_PID CHILD_PID" */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void churn(void) {
    void *volatile keep[64];
    for (int i = 0; i < 64; i++) keep[i] = malloc((size_t)(i * 97 % 5000 + 1));
    for (int i = 0; i < 64; i++) free(keep[i]);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "close";
    churn();
    if (!strcmp(mode, "close")) {
        close(1);
        close(2);
        return 0;
    }
    if (!strcmp(mode, "fds")) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd != 3) { printf("open gave %d, not 3\n", fd); return 1; }
        int own = 0;
        for (int d = 4; d < 1024; d++) {
            int flags = fcntl(d, F_GETFD);
            if (flags < 0) continue;
            if (d < 100) { printf("descriptor %d open\n", d); return 1; }
            if (!(flags & FD_CLOEXEC)) { printf("descriptor %d not closed on exec\n", d); return 1; }
            own++;
        }
        if (own != 1) { printf("%d descriptors of hakmem's, want 1\n", own); return 1; }
        printf("ok\n");
        return 0;
    }
    if (!strcmp(mode, "fork")) {
        fflush(stdout);
        pid_t child = fork();
        if (child < 0) return 1;
        if (child == 0) {
            churn();
            exit(0);    /* its report comes from hakmem's destructor */
        }
        int status;
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) return 1;
        printf("%d %d\n", (int)getpid(), (int)child);
        return 0;
    }
    return 2;
}
