/* hakmem: a general-purpose memory allocator.
 *
 * Programs get hakmem by LD_PRELOAD=libhakmem.so or by linking -lhakmem, in
 * which case the standard malloc API (malloc, free, calloc, realloc, ...) is
 * served by hakmem. The hak_* names below are the same functions under names
 * that never clash with the C library: use them to call hakmem explicitly, or
 * in builds configured with -Dinterpose=false (no malloc interposition). */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

void  *hak_malloc(size_t size);
void   hak_free(void *ptr);
void  *hak_calloc(size_t nmemb, size_t size);
void  *hak_realloc(void *ptr, size_t size);
void  *hak_reallocarray(void *ptr, size_t nmemb, size_t size);
int    hak_posix_memalign(void **out, size_t alignment, size_t size);
void  *hak_aligned_alloc(size_t alignment, size_t size);
void  *hak_memalign(size_t alignment, size_t size);
void  *hak_valloc(size_t size);
void  *hak_pvalloc(size_t size);
size_t hak_malloc_usable_size(void *ptr);
void   hak_free_sized(void *ptr, size_t size);
void   hak_free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* glibc's <malloc.h> extras, for hakmem's memory (the standard names are
 * the same functions when hakmem interposes malloc). hak_malloc_trim gives
 * back what is cached and the pages of free slabs now, ignoring pad, and
 * returns 1 if anything went back. hak_mallinfo2 and hak_mallinfo report
 * hakmem's mappings (see api/malloc_extras.c for what each field holds;
 * include <malloc.h> for the structs). hak_malloc_stats prints the
 * counters to stderr; hak_malloc_info writes the mallinfo2 figures to fp as
 * XML (options must be 0). */
struct mallinfo;
struct mallinfo2;
int    hak_malloc_trim(size_t pad);
struct mallinfo2 hak_mallinfo2(void);
struct mallinfo hak_mallinfo(void);
void   hak_malloc_stats(void);
int    hak_malloc_info(int options, FILE *fp);

/* 1 when ptr is the start of a block hakmem handed out, else 0 (stack,
 * static, foreign, interior or garbage pointers, freed large blocks). A small
 * block that was freed may still answer 1 while the run holding it is in
 * use. Never faults, whatever ptr is. */
int    hak_owns(const void *ptr);

/* Prints the resolved configuration (the same text as HAKMEM_VERBOSE=1) and,
 * when stats are on, the counters, to stderr. */
void   hak_print_config(void);
void   hak_print_stats(void);

#ifdef __cplusplus
}
#endif
#endif
