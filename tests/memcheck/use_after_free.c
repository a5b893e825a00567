/* A program with deliberate bugs, run under memcheck by the `memcheck` test:
 * hakmem's valgrind build must let memcheck see each of them. */
#include <malloc.h>
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
    } else if (!strcmp(bug, "slack")) {
        char *p = malloc(40);             /* in a 48-byte class */
        volatile char *q = p;
        q[40] = 1;                        /* one past the request, inside the class */
        free(p);
    } else if (!strcmp(bug, "grow")) {
        char *p = malloc(40), *q = realloc(p, 44);   /* stays in its class */
        if (q != p || malloc_usable_size(q) != 44) return 3;
        volatile char *v = q;
        v[43] = 1;                        /* fine */
        v[44] = 1;                        /* past the new size */
        free(q);
    } else if (!strcmp(bug, "shrink")) {
        char *p = malloc(40), *q = realloc(p, 20);
        if (q != p || malloc_usable_size(q) != 20) return 3;
        volatile char *v = q;
        v[20] = 1;                        /* past the new size */
        free(q);
    } else if (!strcmp(bug, "clean")) {
        /* malloc_usable_size says the request (as glibc's does under
         * memcheck), so a program may fill what it says */
        static const size_t sizes[] = { 0, 1, 7, 40, 1000, 5000, 300000 };
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            char *p = malloc(sizes[i]);
            if (malloc_usable_size(p) != sizes[i]) return 3;
            memset(p, 1, malloc_usable_size(p));
            free(p);
        }
        for (int i = 0; i < 10000; i++) free(malloc((size_t)i % 5000 + 1));
        char *p = realloc(NULL, 10), *q = realloc(p, 3 << 20);
        free(q);
    }
    return 0;
}
