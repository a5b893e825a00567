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
#include <stdint.h>
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

/* The counters, as figures (the HAKMEM_STATS=1 report prints these).
 *
 * Contract: declare a struct hak_stats and pass its address and
 * sizeof(struct hak_stats). The library fills min(size, its own
 * sizeof(struct hak_stats)) bytes from the start of the struct, sets the
 * bytes from there up to size to zero, and returns how many bytes it
 * filled. A program built against an older header (a smaller struct)
 * gets the fields it knows; one built against a newer header gets zero in
 * the fields this library does not know, and learns where they start from
 * the return value. Returns -1 (errno EINVAL) when out is NULL or size is
 * 0, writing nothing.
 *
 * Fields are only ever added at the end (HAK_STATS_VERSION goes up when
 * they are); none is moved, resized or removed, so the fixed-size arrays
 * below keep room. version is the library's HAK_STATS_VERSION.
 *
 * The figures are a snapshot taken heap by heap, each under its heap's
 * lock: threads running meanwhile may make totals and per-heap figures
 * differ by what they did between two heaps. Counters only grow; figures
 * of what is held now (blocks out, SuperSlabs, spans) go up and down. Not
 * for hit paths: it takes every heap's lock. */
#define HAK_STATS_VERSION     2   /* 2: lock waits (nlock_kinds, locks) */
#define HAK_STATS_MAX_CLASSES 96   /* room for every size class (class 0 included) */
#define HAK_STATS_MAX_HEAPS   64   /* heaps listed one by one; the count covers all */
#define HAK_STATS_MAX_LOCK_KINDS 16 /* room for every kind of lock */

/* The kinds of hakmem's internal locks, indexes of hak_stats.locks. */
enum hak_stats_lock_kind {
    HAK_STATS_LOCK_HEAP,       /* a heap's runs and lists (every heap's, summed), the transfer cache */
    HAK_STATS_LOCK_HEAP_LIST,  /* the registry of heaps and queue of abandoned ones */
    HAK_STATS_LOCK_SS_POOL,    /* the pool of empty SuperSlabs */
    HAK_STATS_LOCK_LARGE,      /* the cache of large spans */
    HAK_STATS_LOCK_OS_META,    /* the region hakmem's metadata comes from */
    HAK_STATS_LOCK_OTHER,      /* init, fork, the memcheck size table */
    HAK_STATS_LOCK_KINDS
};

struct hak_stats_class {
    uint64_t size;            /* block size in bytes (0: class 0, which is no class) */
    uint64_t refills;         /* misses of thread caches for this class */
    uint64_t carved_blocks;   /* blocks carved from untouched run space */
};

struct hak_stats_heap {
    uint64_t id;              /* 1 for the first heap made, 2 for the next, ... */
    uint64_t blocks_out;      /* blocks not on a run's free list: in use or in a cache */
    uint64_t bytes_out;       /* the same in bytes */
    uint64_t refills;
    uint64_t runs_made, runs_freed;
    uint64_t superslabs;      /* SuperSlabs it holds now */
    uint64_t thread_exited;   /* 1: its thread exited and no thread took the heap over */
};

/* Waits for one kind of lock. Only acquisitions that found the lock held
 * are counted (an uncontended lock costs nothing for them), and no lock is
 * taken on a cache hit. */
struct hak_stats_lock {
    uint64_t waits;     /* acquisitions that had to wait */
    uint64_t spins;     /* pause-loop rounds spent waiting */
    uint64_t yields;    /* times a waiter gave up the CPU (sched_yield) */
    uint64_t wait_ns;   /* time waited, from the failed first try to acquisition */
    uint64_t max_wait_ns;   /* the longest single wait */
};

struct hak_stats {
    uint32_t version;         /* HAK_STATS_VERSION of the library */
    uint32_t size;            /* bytes filled, as returned */

    /* heaps: one per thread that allocated (a heap outlives its thread
     * and passes to the next thread that starts) */
    uint64_t heaps;
    uint64_t bytes_out;       /* small blocks out of their runs, every heap */

    /* thread caches: misses (refills) and the blocks they brought; flushes
     * back to the runs */
    uint64_t refills, refilled_blocks, flushes, flushed_blocks;
    uint64_t borrowed_blocks;   /* refilled from a larger class's runs */
    uint64_t borrowed_remote;   /* refilled from other heaps' runs */
    uint64_t standin_blocks;    /* misses served from the bin of a larger class */
    /* frees of other threads' blocks, and their heaps' inbox drains */
    uint64_t remote_blocks, remote_pushes, inbox_drains, inbox_blocks;
    uint64_t runs_made, runs_freed, ss_acquired, ss_released;
    /* the decay clock: ticks, purges of free pages, purge calls for free
     * slabs over the bound, thread bins emptied for being idle */
    uint64_t decay_ticks, decay_purges, dirty_purges, idle_bins, idle_bin_blocks;
    /* free pages inside runs in use given back */
    uint64_t hollowed_runs, hollow_calls, hollowed_blocks;

    /* the SuperSlab pool (SuperSlabs of superslab_bytes each) */
    uint64_t superslab_bytes;
    uint64_t ss_mapped, ss_reused, ss_purged, ss_unmapped, ss_cached, ss_live;
    uint64_t ss_decayed;        /* purges of whole ready SuperSlabs by the clock */

    /* the large path (blocks above 256 KiB, each its own span) */
    /* large_splits: cached spans cut; large_grown: blocks given pages of
     * cached spans (moved by mremap) */
    uint64_t large_mapped, large_unmapped, large_cache_hits, large_splits, large_grown;
    uint64_t large_remaps, large_purges, large_live_bytes, large_live_spans, large_cached_bytes;

    /* per size class, indexed by class number: entries 0 to nclasses - 1 */
    uint32_t nclasses;
    uint32_t pad0;
    struct hak_stats_class classes[HAK_STATS_MAX_CLASSES];

    /* per heap, the first ones made in the order they were made (ids 1,
     * 2, ...): heaps_listed entries, min(heaps, HAK_STATS_MAX_HEAPS) */
    uint32_t heaps_listed;
    uint32_t pad1;
    struct hak_stats_heap heap[HAK_STATS_MAX_HEAPS];

    /* version 2: lock waits, indexed by enum hak_stats_lock_kind: entries
     * 0 to nlock_kinds - 1 */
    uint32_t nlock_kinds;
    uint32_t pad2;
    struct hak_stats_lock locks[HAK_STATS_MAX_LOCK_KINDS];
};

int    hak_stats_get(struct hak_stats *out, size_t size);

#ifdef __cplusplus
}
#endif
#endif
