/* A program with deliberate bugs, run under memcheck by the `memcheck` test:
 * hakmem's valgrind build must let memcheck see each of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *bug = argc > 1 ? argv[1] : "uaf";
    if (!strcmp(bug, "uaf")) {
        char *p = malloc(64);
        strcpy(p, "hello");
        free(p);
        volatile char c = p[1];           /* read after free */
        (void)c;
    } else if (!strcmp(bug, "leak")) {
        void *volatile p = malloc(1000);  /* never freed, pointer dropped */
        p = NULL;
        (void)p;
    } else if (!strcmp(bug, "overflow")) {
        char *p = malloc(256);            /* 256 is a class size: no slack */
        volatile char *q = p;
        q[256] = 1;                       /* one past the end */
        free(p);
    } else if (!strcmp(bug, "clean")) {
        for (int i = 0; i < 10000; i++) free(malloc((size_t)i % 5000 + 1));
        char *p = realloc(NULL, 10), *q = realloc(p, 3 << 20);
        free(q);
    }
    return 0;
}
