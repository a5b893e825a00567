#define _GNU_SOURCE
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The page hakmem's layout is built for (OS_PAGE_SIZE, base/common.h,
 * which this layer does not include). */
#define OS_PAGE_SIZE 4096

static inline size_t align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

void hak_os_yield(void) {
    sched_yield();
}

/* Rounds of the pause loop (a few microseconds: most holders are done by
 * then when they run), then yields until the word is free. A futex sleep
 * after the spins makes convoys when threads outnumber cores (docs/
 * PERFORMANCE.md, "Locks when threads outnumber cores"). */
#define LOCK_SPINS 64

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The fork's owner: the address of its thread's fork_token. */
static __thread char fork_token __attribute__((tls_model("initial-exec")));
static const char *_Atomic fork_owner;

void hak_os_fork_own(int on) {
    atomic_store_explicit(&fork_owner, on ? &fork_token : NULL, memory_order_relaxed);
}

void hak_os_lock_wait(_Atomic int *word, int value, struct hak_lock_waits *acc) {
    if (value == 1 && atomic_load_explicit(word, memory_order_relaxed) == 2 &&
        atomic_load_explicit(&fork_owner, memory_order_relaxed) == &fork_token)
        return;
    uint64_t t0 = hak_os_clock_ns(), spins = 0, yields = 0;
    for (;;) {
        while (atomic_load_explicit(word, memory_order_relaxed)) {
            if (spins < LOCK_SPINS) {
                spins++;
                cpu_relax();
            } else {
                yields++;
                sched_yield();
            }
        }
        int free_ = 0;
        if (atomic_compare_exchange_strong_explicit(word, &free_, value, memory_order_acquire,
                                                    memory_order_relaxed))
            break;
    }
    __atomic_fetch_add(&acc->waits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&acc->spins, spins, __ATOMIC_RELAXED);
    __atomic_fetch_add(&acc->yields, yields, __ATOMIC_RELAXED);
    uint64_t waited = hak_os_clock_ns() - t0;
    __atomic_fetch_add(&acc->wait_ns, waited, __ATOMIC_RELAXED);
    uint64_t max = __atomic_load_n(&acc->max_wait_ns, __ATOMIC_RELAXED);
    while (waited > max && !__atomic_compare_exchange_n(&acc->max_wait_ns, &max, waited, 1,
                                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* Mappings are accounted (no MAP_NORESERVE): under the kernel's default
 * overcommit heuristic, a request larger than RAM and swap together is
 * refused at once, so malloc returns NULL with ENOMEM as glibc's does,
 * instead of a block the process is killed for touching. */
void *hak_os_map_aligned(size_t size, size_t align) {
    int saved = errno;
    /* Try the exact size first: the kernel often hands out aligned addresses
     * when the previous mapping ended on one. */
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { errno = saved; return NULL; }
    if (((uintptr_t)p & (align - 1)) == 0) return p;
    munmap(p, size);
    size_t over = size + align;
    if (over < size) { errno = saved; return NULL; }
    char *raw = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        /* Under an address-space limit the slack may be what does not fit:
         * the aligned place just below where the exact size went, which
         * the kernel's top-down placement usually leaves free, needs none. */
        char *below = (char *)((uintptr_t)p & ~(uintptr_t)(align - 1));
        void *q = mmap(below, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (q != MAP_FAILED && q != below) munmap(q, size);   /* a kernel that took it for a hint */
        errno = saved;
        return q == below ? q : NULL;
    }
    char *aligned = (char *)align_up((uintptr_t)raw, align);
    if (aligned > raw) munmap(raw, (size_t)(aligned - raw));
    size_t tail = (size_t)(raw + over - (aligned + size));
    if (tail) munmap(aligned + size, tail);
    errno = saved;
    return aligned;
}

size_t hak_os_address_space_limit(void) {
    int saved = errno;
    struct rlimit r;
    int limited = getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < SIZE_MAX;
    errno = saved;
    return limited ? (size_t)r.rlim_cur : SIZE_MAX;
}

void *hak_os_next_map_hint(void) {
    int saved = errno;
    void *p = mmap(NULL, OS_PAGE_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) { errno = saved; return NULL; }
    munmap(p, OS_PAGE_SIZE);
    errno = saved;
    return p;
}

void hak_os_unmap(void *p, size_t size) {
    int saved = errno;
    munmap(p, size);
    errno = saved;
}

uint64_t hak_os_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint32_t hak_os_clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

static size_t os_page;   /* 0: not asked yet */

/* The kernel's page size, asked the first time only. getpagesize, not
 * sysconf: it returns what the dynamic linker already holds, while
 * sysconf runs through a table in a part of libc's read-only data that
 * a program may never touch otherwise (a 64 KiB window of resident file
 * pages; docs/PERFORMANCE.md, "Process baseline"). */
size_t hak_os_page_size(void) {
    size_t pg = __atomic_load_n(&os_page, __ATOMIC_RELAXED);
    if (!pg) {
        long v = getpagesize();
        pg = v > 0 ? (size_t)v : OS_PAGE_SIZE;
        __atomic_store_n(&os_page, pg, __ATOMIC_RELAXED);
    }
    return pg;
}

int hak_os_pages_match(void) {
    return hak_os_page_size() == OS_PAGE_SIZE;
}

void hak_os_purge(void *p, size_t size) {
    int saved = errno;
    madvise(p, size, MADV_DONTNEED);
    errno = saved;
}

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

/* Private, so a fork copies on write as with any other heap page. The
 * size is named (MAP_HUGE_2MB), not the system's default huge page, which
 * may be 1 GiB: the mapping is then 2 MiB aligned by construction. */
void *hak_os_map_hugetlb(size_t size) {
    int saved = errno;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB,
                   -1, 0);
    errno = saved;
    if (p == MAP_FAILED) return NULL;
    if ((uintptr_t)p & (((size_t)2 << 20) - 1)) {   /* not 2 MiB pages after all */
        munmap(p, size);
        return NULL;
    }
    return p;
}

int hak_os_advise_huge(void *p, size_t size) {
    int saved = errno;
    int rc = madvise(p, size, MADV_HUGEPAGE);
    errno = saved;
    return rc;
}

long hak_os_read_file(const char *path, char *buf, size_t len) {
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    long got = -1;
    if (fd >= 0) {
        got = 0;
        while ((size_t)got + 1 < len) {
            ssize_t n = read(fd, buf + got, len - 1 - (size_t)got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += n;
        }
        close(fd);
    }
    if (len) buf[got > 0 ? got : 0] = 0;
    errno = saved;
    return got;
}

void *hak_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align) {
    int saved = errno;
    /* Growing in place keeps the address (and its alignment). */
    void *q = mremap(p, old_size, new_size, 0);
    if (q != MAP_FAILED) { errno = saved; return q; }
    /* Otherwise the pages move (no copy) to an aligned home, mapped first
     * (so that nothing has moved if there is no room) at the new size: they
     * move onto its start at their old size, and the rest of it, fresh
     * zero pages, is the growth. The address space this needs at once is
     * old + new, as a plain moving mremap's; growing with the move first,
     * then moving again to the home, needed old + 2 x new (a doubling
     * realloc stopped at half what glibc's reaches under ulimit -v). One
     * mremap that grows and moves to a fixed home at once sometimes left
     * the grown part unaddressable for valgrind's memcheck (false reports
     * in about 1 run of 10 of the threads suite); a move at the same size
     * does not. */
    char *dst = hak_os_map_aligned(new_size, align);
    if (!dst) { errno = saved; return NULL; }
    size_t keep = old_size < new_size ? old_size : new_size;
    if (mremap(p, old_size, keep, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == MAP_FAILED) {
        munmap(dst, new_size);
        errno = saved;
        return NULL;
    }
    errno = saved;
    return dst;
}

int hak_os_move_pages(void *src, size_t size, void *dst) {
    int saved = errno;
    void *q = mremap(src, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    errno = saved;
    return q == MAP_FAILED ? -1 : 0;
}

/* Called from malloc: by syscall(2), since libc's open and read are
 * cancellation points, and a thread cancelled inside malloc would leave
 * the allocator in the middle of a change. */
long hak_os_count_maps(void) {
    int saved = errno;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    long lines = -1;
    if (fd >= 0) {
        char buf[4096];
        lines = 0;
        for (;;) {
            ssize_t n = syscall(SYS_read, fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) { lines = -1; break; }
            if (n == 0) break;
            for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
        }
        syscall(SYS_close, fd);
    }
    errno = saved;
    return lines;
}

void hak_os_write_stderr(const char *buf, size_t n) {
    int saved = errno;
    ssize_t w = write(STDERR_FILENO, buf, n);
    (void)w;
    errno = saved;
}

void hak_os_write_fd(int fd, const char *buf, size_t n) {
    int saved = errno;
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        buf += w;
        n -= (size_t)w;
    }
    errno = saved;
}

int hak_os_report_fd(const char *path) {
    int saved = errno;
    int src = path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : STDERR_FILENO;
    int fd = src < 0 ? -1 : fcntl(src, F_DUPFD_CLOEXEC, HAK_OS_OWN_FD);
    if (path && src >= 0) close(src);
    errno = saved;
    return fd;
}

void hak_os_close(int fd) {
    int saved = errno;
    close(fd);
    errno = saved;
}

int hak_os_getpid(void) {
    return (int)getpid();
}

int hak_os_is_initial_thread(void) {
    return syscall(SYS_gettid) == (long)getpid();
}

int hak_os_read_checked(const void *addr, void *out, size_t n) {
    struct iovec local = { out, n }, remote = { (void *)addr, n };
    int saved = errno;
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    errno = saved;
    return got == (ssize_t)n;
}

int hak_os_page_mapped(const void *addr) {
    unsigned char vec;
    int saved = errno;
    int r = mincore((void *)addr, OS_PAGE_SIZE, &vec);
    errno = saved;
    return r == 0;   /* ENOMEM: not mapped */
}

int hak_os_random(void *buf, size_t n) {
    int saved = errno;
    ssize_t got = getrandom(buf, n, GRND_NONBLOCK);
    errno = saved;
    return got == (ssize_t)n;
}

int hak_os_protect(void *p, size_t size, int access) {
    int saved = errno;
    int r = mprotect(p, size, access ? PROT_READ | PROT_WRITE : PROT_NONE);
    errno = saved;
    return r;
}

/* Guard pages by the kernel's guard markers (madvise MADV_GUARD_INSTALL,
 * Linux 6.13): a page-table entry that faults, where mprotect splits the
 * mapping in three and merges it back under the mapping lock held for
 * writing, which threads allocating large blocks at once queue on. The
 * first call asks whether the kernel has them (removing markers from a
 * page that has none is a no-op there, EINVAL before). A mapping that
 * refuses them (mlock) gets mprotect for that page, and from then on a
 * removal undoes both. */
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif
static _Atomic int guard_markers = -1;   /* -1 not asked yet, 0 none, 1 the kernel has them */
static _Atomic int guard_fell_back;      /* 1: some page was protected instead */

int hak_os_guard(void *p, size_t size, int on) {
    int saved = errno, r = 0;
    int markers = atomic_load(&guard_markers);
    if (markers < 0) {
        markers = madvise(p, size, MADV_GUARD_REMOVE) == 0;
        atomic_store(&guard_markers, markers);
    }
    if (on) {
        if (!markers || madvise(p, size, MADV_GUARD_INSTALL) != 0) {
            if (markers) atomic_store(&guard_fell_back, 1);
            r = mprotect(p, size, PROT_NONE);
        }
    } else {
        if (markers) r = madvise(p, size, MADV_GUARD_REMOVE);
        if (!markers || atomic_load(&guard_fell_back)) r |= mprotect(p, size, PROT_READ | PROT_WRITE);
    }
    errno = saved;
    return r;
}

/* Metadata (heaps) comes from a bump region of 1 MiB (or one request's
 * size) at a time: room for some 280 heaps, of pages that take memory
 * only once written. Its offset is bumped with an atomic add, no lock: the
 * threads that start at once each make a heap, and a lock here made them
 * wait for a holder the scheduler had taken off the CPU (hundreds of
 * threads on two cores: seconds). A lock of this layer's own (base's spin
 * lock is a layer above) only keeps two threads from mapping the next
 * region at once, and fork from copying one half installed. A region's
 * header is at its start, on the page of its first block: a process with
 * a heap or two writes one page of the region, not two. */
#define META_REGION ((size_t)1 << 20)
struct meta_region {
    _Atomic size_t used;   /* offset of the next block (past size once spent) */
    size_t size;           /* bytes of the region, this header included */
};
#define META_HEAD align_up(sizeof(struct meta_region), 64)
static _Atomic(struct meta_region *) meta_region;
static _Atomic int meta_lock;
static struct hak_lock_waits meta_waits;

/* value 1, or 2 for fork's prepare (the lock's values: base/common.h) */
static void meta_lock_take_as(int value) {
    int free_ = 0;
    if (!atomic_compare_exchange_strong_explicit(&meta_lock, &free_, value, memory_order_acquire,
                                                 memory_order_relaxed))
        hak_os_lock_wait(&meta_lock, value, &meta_waits);
}
static void meta_lock_take(void) { meta_lock_take_as(1); }
static void meta_lock_drop(void) {
    if (atomic_load_explicit(&meta_lock, memory_order_relaxed) != 2)
        atomic_store_explicit(&meta_lock, 0, memory_order_release);
}

void hak_os_meta_lock_waits(struct hak_lock_waits *out) {
    out->waits = __atomic_load_n(&meta_waits.waits, __ATOMIC_RELAXED);
    out->spins = __atomic_load_n(&meta_waits.spins, __ATOMIC_RELAXED);
    out->yields = __atomic_load_n(&meta_waits.yields, __ATOMIC_RELAXED);
    out->wait_ns = __atomic_load_n(&meta_waits.wait_ns, __ATOMIC_RELAXED);
    out->max_wait_ns = __atomic_load_n(&meta_waits.max_wait_ns, __ATOMIC_RELAXED);
}

void *hak_os_meta_alloc(size_t size) {
    size = align_up(size, 64);
    for (;;) {
        struct meta_region *r = atomic_load_explicit(&meta_region, memory_order_acquire);
        if (r) {
            size_t off = atomic_fetch_add_explicit(&r->used, size, memory_order_relaxed);
            if (off <= r->size && r->size - off >= size) return (char *)r + off;
        }
        meta_lock_take();
        if (atomic_load_explicit(&meta_region, memory_order_relaxed) == r) {   /* still spent */
            size_t chunk = align_up(META_HEAD + size, OS_PAGE_SIZE);
            if (chunk < META_REGION) chunk = META_REGION;
            int saved = errno;
            void *p = mmap(NULL, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            errno = saved;
            if (p == MAP_FAILED) {
                meta_lock_drop();
                return NULL;
            }
            struct meta_region *n = p;
            n->size = chunk;
            atomic_store_explicit(&n->used, META_HEAD + size, memory_order_relaxed);   /* the first block: ours */
            atomic_store_explicit(&meta_region, n, memory_order_release);
            meta_lock_drop();
            return (char *)p + META_HEAD;
        }
        meta_lock_drop();   /* another thread mapped one meanwhile: bump it */
    }
}

void hak_os_fork_prepare(void) { meta_lock_take_as(2); }
void hak_os_fork_parent(void) { atomic_store_explicit(&meta_lock, 0, memory_order_release); }
void hak_os_fork_child(void) { atomic_store_explicit(&meta_lock, 0, memory_order_release); }
