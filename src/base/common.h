/* Shared definitions for every hakmem translation unit: the address layout
 * constants, branch hints and the spin lock used on rare global paths. */
#ifndef HAK_COMMON_H
#define HAK_COMMON_H

#include "config.h"
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>

#define HAK_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HAK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HAK_INLINE      static inline __attribute__((always_inline))
#define HAK_NOINLINE    __attribute__((noinline))
#define HAK_COLD        __attribute__((cold, noinline))
/* A large zero-filled table of which a process touches a few pages: in
 * x86-64's large-data .lbss, which the linker places after all of .bss, so
 * that the small variables every process touches share as few pages as
 * they can instead of lying on both sides of it. */
#if defined(__x86_64__)
#define HAK_SPARSE      __attribute__((section(".lbss")))
#else
#define HAK_SPARSE
#endif
#define HAK_EXPORT      __attribute__((visibility("default")))
/* A standard name (malloc, ...) for a hak_* function: the same code, so
 * interposing costs no call (only used when HAKMEM_INTERPOSE). */
#define HAK_ALIAS(name) __attribute__((alias(name), visibility("default")))
/* Internal data declared in headers: hidden, so code reaches it PC-relative
 * instead of through the GOT (-fvisibility=hidden covers definitions only). */
#define HAK_DATA        extern __attribute__((visibility("hidden")))

/* 1 in a build with ASan or TSan (GCC says so with macros, clang with
 * __has_feature). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HAK_HAS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HAK_HAS_SANITIZER 1
#endif
#endif
#ifndef HAK_HAS_SANITIZER
#define HAK_HAS_SANITIZER 0
#endif

/* Everything hakmem hands out lives in 2 MiB-aligned chunks: a SuperSlab is
 * one chunk, a large span is one or more. The chunk map (one byte per chunk)
 * is what makes "is this pointer ours?" an O(1) lookup without a syscall. */
#define HAK_CHUNK_SHIFT 21
#define HAK_CHUNK_SIZE  ((size_t)1 << HAK_CHUNK_SHIFT)
#define HAK_CHUNK_MASK  (HAK_CHUNK_SIZE - 1)

/* A SuperSlab is carved into 32 slabs of 64 KiB; slab 0 holds the header. */
#define HAK_SLAB_SHIFT  16
#define HAK_SLAB_SIZE   ((size_t)1 << HAK_SLAB_SHIFT)
#define HAK_SLABS_PER_SS 32

#define HAK_ALIGNMENT   16
#define HAK_PAGE_SIZE   4096

/* Lower and upper bound of user-space addresses the chunk map covers. */
#define HAK_ADDR_BITS   47

static inline size_t hak_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* What a lock guards, for the wait counts (base/spin_lock.c, reported by
 * hak_stats_get in the same order: include/hakmem.h). */
enum hak_lock_kind {
    HAK_LOCK_HEAP,       /* a heap's runs and lists; the transfer cache */
    HAK_LOCK_HEAP_LIST,  /* the registry of heaps and the abandoned queue */
    HAK_LOCK_SS_POOL,    /* the pool of empty SuperSlabs */
    HAK_LOCK_LARGE,      /* the large spans' cache */
    HAK_LOCK_OS_META,    /* the metadata region (os layer, its own lock) */
    HAK_LOCK_OTHER,      /* init, fork, the memcheck size table */
    HAK_LOCK_NKINDS
};
/* A test-and-test-and-set lock for rare global paths (SuperSlab pool, large
 * cache, heap adoption) and for a heap's misses. It never sleeps in the kernel: no futex can come
 * from hakmem. Contention backs off by yielding (os/os.c, hak_os_lock_wait). */
typedef struct { atomic_int v; uint32_t kind; } hak_spinlock_t;
#define HAK_SPINLOCK_INIT { 0, HAK_LOCK_OTHER }
#define HAK_SPINLOCK_INIT_KIND(k) { 0, (k) }
/* The contended path: waits, counted under l->kind. */
void hak_spin_lock_slow(hak_spinlock_t *l);
/* The wait counts of the spin locks of each kind (out[HAK_LOCK_NKINDS]; the
 * os meta lock counts its own: hak_os_meta_lock_waits). */
struct hak_lock_waits;
void hak_spin_lock_waits(struct hak_lock_waits *out);
/* A lock word holds 0 (free), 1 (held) or 2: held by fork's prepare
 * handler (api/fork.c) for the forking thread, which may then run other
 * libraries' fork handlers that allocate: its own takes and releases of a
 * 2 do nothing (os/os.c, hak_os_lock_wait), everyone else waits on a 2 as
 * on a 1. Hence compare-exchange from 0, never exchange, which would
 * overwrite a 2, and an unlock that leaves a 2 alone. */
#define HAK_LOCK_FORK 2
static inline void hak_spin_lock(hak_spinlock_t *l) {
    int free_ = 0;
    if (HAK_LIKELY(atomic_compare_exchange_strong_explicit(&l->v, &free_, 1, memory_order_acquire,
                                                           memory_order_relaxed)))
        return;
    hak_spin_lock_slow(l);
}
/* 1 if it took the lock; 0, at once, if someone holds it (a 2 too). */
static inline int hak_spin_trylock(hak_spinlock_t *l) {
    int free_ = 0;
    return atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
           atomic_compare_exchange_strong_explicit(&l->v, &free_, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}
static inline void hak_spin_unlock(hak_spinlock_t *l) {
    if (HAK_LIKELY(atomic_load_explicit(&l->v, memory_order_relaxed) != HAK_LOCK_FORK))
        atomic_store_explicit(&l->v, 0, memory_order_release);
}
/* fork's prepare handler takes with 2, its parent and child handlers
 * release (base/spin_lock.c). */
void hak_spin_fork_take(hak_spinlock_t *l);
static inline void hak_spin_fork_release(hak_spinlock_t *l) {
    atomic_store_explicit(&l->v, 0, memory_order_release);
}

#endif
