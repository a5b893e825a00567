/* The OS layer: every system call hakmem makes goes through here, so
 * counting and reasoning about them needs one file. The bottom layer: it
 * includes and calls nothing else of hakmem's (scripts/check-layers).
 * Each function keeps errno as it found it: a malloc that succeeds must not
 * change it. */
#ifndef HAK_OS_H
#define HAK_OS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Maps size bytes (a multiple of HAK_CHUNK_SIZE) read-write at an address
 * aligned to align (a power of two >= HAK_CHUNK_SIZE). NULL on failure. */
void *hak_os_map_aligned(size_t size, size_t align);
void  hak_os_unmap(void *p, size_t size);
/* The address-space limit (RLIMIT_AS, ulimit -v) in bytes, SIZE_MAX when
 * none: address space the process maps but never touches counts there. */
size_t hak_os_address_space_limit(void);
/* Gives the pages back to the OS; the range stays mapped and reads as zero. */
void  hak_os_purge(void *p, size_t size);
/* Moves or grows a mapping to a new aligned place without copying. */
void *hak_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align);
/* Moves the pages of [src, src + size) onto dst (page aligned, mapped by
 * the caller), without copying, replacing what was there; src is then
 * unmapped. 0, or -1 with nothing moved. */
int   hak_os_move_pages(void *src, size_t size, void *dst);
/* How many mappings (VMAs) the process has (lines of /proc/self/maps),
 * or -1 when that cannot be read. Reads the whole file: call rarely. */
long  hak_os_count_maps(void);
/* Where the kernel would place the next mapping (a probe mapped and
 * unmapped at once); NULL if it refused. Asked once, at init. */
void *hak_os_next_map_hint(void);
/* Zero-filled memory for the allocator's own metadata; never freed. */
void *hak_os_meta_alloc(size_t size);
/* A coarse monotonic clock in milliseconds (the vDSO's, no system call;
 * a few ms of resolution), wrapping: compare with (int32_t)(a - b). */
uint32_t hak_os_clock_ms(void);
/* The kernel's page size (getpagesize, asked once). */
size_t hak_os_page_size(void);
/* 1 when the kernel's page is HAK_PAGE_SIZE: only then may single pages
 * inside a run go back (hollow runs). Whole slabs go back whatever the
 * page size (up to 64 KiB); a pool SuperSlab's purge starts past the
 * kernel page that holds its header (madvise refuses an unaligned start). */
int hak_os_pages_match(void);
/* Lets another thread run (a reader wait's back-off). */
void hak_os_yield(void);
/* A fine monotonic clock in nanoseconds (the vDSO's, no system call): for
 * timing lock waits, on contended paths only. */
uint64_t hak_os_clock_ns(void);

/* What waiting for a lock cost: acquisitions that found it held, the
 * pause-loop rounds and CPU yields they spent, and the time from the
 * failed first try to the acquisition. Counted on the contended path only,
 * with atomic adds (several threads wait at once). */
struct hak_lock_waits {
    uint64_t waits, spins, yields, wait_ns;
    uint64_t max_wait_ns;   /* the longest single wait */
};
/* The contended path of a lock word (0 free, 1 held, 2 held for a fork:
 * base/common.h): spins a bounded number of rounds while the holder may
 * still be running, then yields the CPU between looks, and takes the word
 * with value (1, or 2 for fork's prepare) when it is free; counts into acc.
 * A take with 1 of a word holding 2 by the thread that owns the fork
 * (hak_os_fork_own) returns at once: it runs nested in the fork's
 * handlers, the only thread in allocator code. Never sleeps in the kernel. */
void hak_os_lock_wait(_Atomic int *word, int value, struct hak_lock_waits *acc);
/* Names the calling thread the fork's owner (on), or nobody (off): set
 * once the prepare handler holds every lock, cleared before it releases. */
void hak_os_fork_own(int on);
/* The metadata region's lock (hak_os_meta_alloc), read without stopping it. */
void hak_os_meta_lock_waits(struct hak_lock_waits *out);
/* Writes n bytes of a message to stderr, unbuffered (no malloc). */
void hak_os_write_stderr(const char *buf, size_t n);
/* Writes n bytes to descriptor fd, unbuffered, retrying short writes. */
void hak_os_write_fd(int fd, const char *buf, size_t n);
/* A descriptor of hakmem's own for its reports, numbered HAK_OS_OWN_FD or
 * above (programs expect the low numbers they close and open themselves)
 * and closed on exec: a duplicate of stderr (path NULL) or path opened for
 * appending (created 0644). -1 when it cannot be had. */
#define HAK_OS_OWN_FD 100
int hak_os_report_fd(const char *path);
void hak_os_close(int fd);
int hak_os_getpid(void);
/* 1 on the process's first thread (its thread id is the process id). */
int hak_os_is_initial_thread(void);
/* Copies n bytes from addr of this process into out, or returns 0 when any
 * of them is unmapped or unreadable (the kernel copies: no fault). */
int hak_os_read_checked(const void *addr, void *out, size_t n);
/* 1 when the page at addr (page-aligned) is mapped, whatever its access. */
int hak_os_page_mapped(const void *addr);
/* Fills buf with n bytes from the kernel's random source (getrandom, no
 * blocking); 0 when it could not (the caller mixes in what it has). */
int hak_os_random(void *buf, size_t n);
/* Makes [p, p + size) (page-aligned) inaccessible (access 0) or
 * read-write again (access 1); 0 on success. */
int hak_os_protect(void *p, size_t size, int access);
/* Makes [p, p + size) (page-aligned) a guard (on 1: any access faults;
 * its bytes are dropped) or ordinary memory again (on 0: reads zero);
 * cheaper than hak_os_protect where the kernel has guard markers. */
int hak_os_guard(void *p, size_t size, int on);

/* Huge pages (the hugepage SuperSlab box, backend/ss_hugepage.c). */
/* Maps size bytes (a multiple of 2 MiB) of the system's reserved 2 MiB
 * pages (MAP_HUGETLB), aligned to 2 MiB; NULL when the reserve cannot
 * hold them. */
void *hak_os_map_hugetlb(size_t size);
/* Asks for transparent huge pages over [p, p + size) (MADV_HUGEPAGE);
 * 0 on success. */
int hak_os_advise_huge(void *p, size_t size);
/* Reads up to len - 1 bytes of a (proc or sys) file into buf, NUL
 * terminated; returns the bytes read, or -1 when it cannot be read. */
long hak_os_read_file(const char *path, char *buf, size_t len);

/* fork(): the metadata region's lock is held across it. */
void hak_os_fork_prepare(void);
void hak_os_fork_parent(void);
void hak_os_fork_child(void);
#endif
