/* pair: the tiny hit path alone, for instruction counts.
 *
 *   pair N [SIZE]
 *
 * N times: malloc(SIZE) (default 32), an empty asm barrier so the compiler
 * keeps the pair, free. A few blocks stay allocated around the loop so every
 * allocator is past its first-use setup. bench/fastpath-ir runs it under
 * callgrind twice and prints the instructions of one pair. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: pair N [SIZE]\n");
        return 2;
    }
    long n = atol(argv[1]);
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 32;
    void *keep[16];
    for (int i = 0; i < 16; i++)
        keep[i] = malloc(size);
    for (long i = 0; i < n; i++) {
        void *p = malloc(size);
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    for (int i = 0; i < 16; i++)
        free(keep[i]);
    return 0;
}
