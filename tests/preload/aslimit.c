/* Programs for aslimit.sh, run under `ulimit -v` with and without hakmem:
 *
 *   aslimit blocks    mallocs 24,000-byte blocks until malloc fails, writes
 *                     one byte of each; prints the MiB obtained
 *   aslimit doubling  grows one block by realloc, doubling from 1 MiB, until
 *                     realloc fails, writing its last byte and checking its
 *                     first; prints the largest size reached in MiB
 *
 * Both exit 1 if a block's contents were lost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int blocks(void) {
    size_t n = 0;
    char *b;
    while ((b = malloc(24000)) != NULL) {
        b[0] = (char)n;
        b[23999] = 1;
        n++;
    }
    printf("%zu\n", n * 24000 / (1024 * 1024));
    return 0;
}

static int doubling(void) {
    size_t size = 1 << 20, best = 0;
    char *p = malloc(size);
    while (p) {
        best = size;
        p[size - 1] = 1;
        if (size > ((size_t)1 << 40)) break;
        char *q = realloc(p, 2 * size);
        if (!q) break;
        p = q;
        if (p[0] != 'x' && best > (1 << 20)) return 1;
        p[0] = 'x';
        size *= 2;
    }
    printf("%zu\n", best >> 20);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "blocks")) return blocks();
    if (argc == 2 && !strcmp(argv[1], "doubling")) return doubling();
    fprintf(stderr, "usage: aslimit blocks|doubling\n");
    return 2;
}
