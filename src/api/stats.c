/* hak_stats_get and HAKMEM_STATS=1: counters read as figures, printed at
 * exit from the same figures. Counters are kept only on miss
 * paths (refill, flush, remote free, mapping), so they cost nothing on a hit
 * and need no switch; the option only decides whether they are printed. */
#include "hakmem.h"
#include "api/fork.h"
#include "api/init.h"
#include "base/options.h"
#include "base/report.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "backend/superslab.h"
#include "os/os.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

_Static_assert(HAK_NCLASS <= HAK_STATS_MAX_CLASSES, "struct hak_stats needs room for every class");
_Static_assert((int)HAK_LOCK_NKINDS == HAK_STATS_LOCK_KINDS && HAK_STATS_LOCK_KINDS <= HAK_STATS_MAX_LOCK_KINDS &&
                   (int)HAK_LOCK_HEAP == HAK_STATS_LOCK_HEAP && (int)HAK_LOCK_HEAP_LIST == HAK_STATS_LOCK_HEAP_LIST &&
                   (int)HAK_LOCK_SS_POOL == HAK_STATS_LOCK_SS_POOL && (int)HAK_LOCK_LARGE == HAK_STATS_LOCK_LARGE &&
                   (int)HAK_LOCK_OS_META == HAK_STATS_LOCK_OS_META && (int)HAK_LOCK_OTHER == HAK_STATS_LOCK_OTHER,
               "the lock kinds of base/common.h are hak_stats.locks' indexes");

/* The heaps are visited newest first; the last HAK_STATS_MAX_HEAPS visited
 * (the first made) are kept in a ring and put in order at the end. */
struct gather {
    struct hak_stats *out;
    struct hak_heap_stats sum;
    size_t visited;
    struct hak_stats_heap ring[HAK_STATS_MAX_HEAPS];
};

static void add_heap(struct hak_heap *h, void *arg) {
    struct gather *g = arg;
    struct hak_heap_stats st;
    struct hak_heap_usage u;
    hak_heap_snapshot(h, &st, &u);
    const uint64_t *src = (const uint64_t *)&st;
    uint64_t *dst = (uint64_t *)&g->sum;
    for (size_t i = 0; i < sizeof st / sizeof(uint64_t); i++) dst[i] += src[i];
    g->out->bytes_out += u.bytes_out;
    g->ring[g->visited++ % HAK_STATS_MAX_HEAPS] = (struct hak_stats_heap){
        .blocks_out = u.blocks_out, .bytes_out = u.bytes_out, .refills = st.refills,
        .runs_made = st.runs_made, .runs_freed = st.runs_freed, .superslabs = u.superslabs,
        .thread_exited = (uint64_t)u.orphaned,
    };
}

static void gather(struct hak_stats *s) {
    struct gather g = { .out = s };
    hak_heap_foreach(add_heap, &g);
    const struct hak_heap_stats *t = &g.sum;
    s->version = HAK_STATS_VERSION;
    s->size = sizeof *s;
    s->heaps = g.visited;
    s->refills = t->refills;
    s->refilled_blocks = t->refilled_blocks;
    s->flushes = t->flushes;
    s->flushed_blocks = t->flushed_blocks;
    s->borrowed_blocks = t->borrowed_blocks;
    s->borrowed_remote = t->borrowed_remote;
    s->standin_blocks = t->standin_blocks;
    s->remote_blocks = t->remote_blocks;
    s->remote_pushes = t->remote_pushes;
    s->inbox_drains = t->inbox_drains;
    s->inbox_blocks = t->inbox_blocks;
    s->runs_made = t->runs_made;
    s->runs_freed = t->runs_freed;
    s->ss_acquired = t->ss_acquired;
    s->ss_released = t->ss_released;
    s->decay_ticks = t->decay_ticks;
    s->decay_purges = t->decay_purges;
    s->dirty_purges = t->dirty_purges;
    s->idle_bins = t->idle_bins;
    s->idle_bin_blocks = t->idle_bin_blocks;
    s->hollowed_runs = t->hollowed_runs;
    s->hollow_calls = t->hollow_calls;
    s->hollowed_blocks = t->hollowed_blocks;

    struct hak_ss_pool_stats ss;
    hak_ss_pool_stats(&ss);
    s->superslab_bytes = HAK_CHUNK_SIZE;
    s->ss_mapped = ss.mapped;
    s->ss_reused = ss.reused;
    s->ss_purged = ss.purged;
    s->ss_unmapped = ss.unmapped;
    s->ss_cached = ss.cached;
    s->ss_live = ss.live;
    s->ss_decayed = ss.decayed;

    struct hak_large_stats lg;
    hak_large_stats(&lg);
    s->large_mapped = lg.mapped;
    s->large_unmapped = lg.unmapped;
    s->large_cache_hits = lg.cache_hits;
    s->large_splits = lg.splits;
    s->large_grown = lg.grown;
    s->large_remaps = lg.remaps;
    s->large_purges = lg.purges;
    s->large_live_bytes = lg.live_bytes;
    s->large_live_spans = lg.live_spans;
    s->large_cached_bytes = lg.cached_bytes;

    s->nclasses = HAK_NCLASS;
    for (unsigned c = 0; c < HAK_NCLASS; c++)
        s->classes[c] = (struct hak_stats_class){
            .size = hak_class_size[c], .refills = t->class_refills[c], .carved_blocks = t->class_carved[c],
        };

    struct hak_lock_waits w[HAK_LOCK_NKINDS];
    hak_spin_lock_waits(w);
    hak_os_meta_lock_waits(&w[HAK_LOCK_OS_META]);   /* a lock of the os layer's own */
    s->nlock_kinds = HAK_LOCK_NKINDS;
    for (unsigned k = 0; k < HAK_LOCK_NKINDS; k++)
        s->locks[k] = (struct hak_stats_lock){
            .waits = w[k].waits, .spins = w[k].spins, .yields = w[k].yields, .wait_ns = w[k].wait_ns,
            .max_wait_ns = w[k].max_wait_ns,
        };

    size_t listed = g.visited < HAK_STATS_MAX_HEAPS ? g.visited : HAK_STATS_MAX_HEAPS;
    s->heaps_listed = (uint32_t)listed;
    for (size_t j = 0; j < listed; j++) {   /* heap j + 1 was visited (g.visited - j - 1)th */
        s->heap[j] = g.ring[(g.visited - j - 1) % HAK_STATS_MAX_HEAPS];
        s->heap[j].id = j + 1;
    }
}

HAK_EXPORT int hak_stats_get(struct hak_stats *out, size_t size) {
    if (!out || !size) {
        errno = EINVAL;
        return -1;
    }
    if (size >= sizeof *out) {   /* no copy on the stack (7 KiB) */
        memset(out, 0, size);
        gather(out);
        return (int)sizeof *out;
    }
    struct hak_stats s = { 0 };
    gather(&s);
    s.size = (uint32_t)size;
    memcpy(out, &s, size);
    return (int)size;
}

/* One line of the report to fd (stderr when fd < 0). */
__attribute__((format(printf, 2, 3))) static void say(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hak_vlog_fd(fd, fmt, ap);
    va_end(ap);
}

static void print_stats(int fd) {
    struct hak_stats st;
    hak_stats_get(&st, sizeof st);
    const struct hak_stats *s = &st;
    unsigned long long ss_kib = s->ss_live * (s->superslab_bytes >> 10);
    say(fd, "hakmem: stats: heaps %u; small blocks out %zu KiB (in use or in thread caches); "
            "mapped %llu KiB (SuperSlabs %llu, large spans %llu)\n",
            (unsigned)s->heaps, (size_t)(s->bytes_out >> 10), ss_kib + (s->large_live_bytes >> 10), ss_kib,
            (unsigned long long)(s->large_live_bytes >> 10));
    say(fd, "hakmem: caches: misses (refills) %llu bringing %llu blocks, flushes %llu (blocks %llu); "
            "hits are not counted (that would cost on the hit path)\n",
            (unsigned long long)s->refills, (unsigned long long)s->refilled_blocks,
            (unsigned long long)s->flushes, (unsigned long long)s->flushed_blocks);
    say(fd, "hakmem: refills from a larger class's runs (instead of a new run): %llu blocks; "
            "from other heaps' runs: %llu blocks; "
            "misses served from the thread's bin of a larger class: %llu\n",
            (unsigned long long)s->borrowed_blocks, (unsigned long long)s->borrowed_remote,
            (unsigned long long)s->standin_blocks);
    say(fd, "hakmem: remote: frees %llu in %llu pushes; inbox drains %llu (blocks %llu)\n",
            (unsigned long long)s->remote_blocks, (unsigned long long)s->remote_pushes,
            (unsigned long long)s->inbox_drains, (unsigned long long)s->inbox_blocks);
    say(fd, "hakmem: superslab: runs made %llu freed %llu; superslabs acquired %llu released %llu; "
            "pool: mapped %llu reused %llu purged %llu unmapped %llu cached %llu live %llu (%llu MiB)\n",
            (unsigned long long)s->runs_made, (unsigned long long)s->runs_freed,
            (unsigned long long)s->ss_acquired, (unsigned long long)s->ss_released,
            (unsigned long long)s->ss_mapped, (unsigned long long)s->ss_reused,
            (unsigned long long)s->ss_purged, (unsigned long long)s->ss_unmapped,
            (unsigned long long)s->ss_cached, (unsigned long long)s->ss_live, ss_kib >> 10);
    say(fd, "hakmem: decay: ticks %llu, pages given back %llu times (%llu of them whole ready SuperSlabs); "
            "purge calls for free slabs over the bound %llu; "
            "idle bins emptied %llu (blocks %llu)\n",
            (unsigned long long)s->decay_ticks, (unsigned long long)s->decay_purges,
            (unsigned long long)s->ss_decayed, (unsigned long long)s->dirty_purges,
            (unsigned long long)s->idle_bins, (unsigned long long)s->idle_bin_blocks);
    say(fd, "hakmem: hollow runs (free pages inside runs in use given back): passes %llu, "
            "purge calls %llu, blocks made hollow %llu\n",
            (unsigned long long)s->hollowed_runs, (unsigned long long)s->hollow_calls,
            (unsigned long long)s->hollowed_blocks);
    say(fd, "hakmem: large: mapped %llu unmapped %llu cache hits %llu (cut from a larger span %llu, "
            "given pages of cached spans %llu) remaps %llu; purge calls %llu; live %llu KiB, cached %llu KiB\n",
            (unsigned long long)s->large_mapped, (unsigned long long)s->large_unmapped,
            (unsigned long long)s->large_cache_hits, (unsigned long long)s->large_splits,
            (unsigned long long)s->large_grown, (unsigned long long)s->large_remaps,
            (unsigned long long)s->large_purges, (unsigned long long)(s->large_live_bytes >> 10),
            (unsigned long long)(s->large_cached_bytes >> 10));
    static const char *const lock_names[HAK_STATS_LOCK_KINDS] = {
        [HAK_STATS_LOCK_HEAP] = "heaps", [HAK_STATS_LOCK_HEAP_LIST] = "heap list",
        [HAK_STATS_LOCK_SS_POOL] = "superslab pool", [HAK_STATS_LOCK_LARGE] = "large",
        [HAK_STATS_LOCK_OS_META] = "os meta", [HAK_STATS_LOCK_OTHER] = "other",
    };
    for (unsigned k = 0; k < s->nlock_kinds; k++) {
        const struct hak_stats_lock *l = &s->locks[k];
        say(fd, "hakmem: lock waits: %-14s %llu waits (%llu spins, %llu yields), %llu us waited, "
                "longest %llu us\n",
                lock_names[k], (unsigned long long)l->waits, (unsigned long long)l->spins,
                (unsigned long long)l->yields,
                (unsigned long long)(l->wait_ns / 1000), (unsigned long long)(l->max_wait_ns / 1000));
    }
    static const char *const fork_states[] = {
        [HAK_FORK_NOT_NEEDED] = "not needed (one thread)",
        [HAK_FORK_REGISTERED] = "registered",
        [HAK_FORK_FAILED] = "registration failed",
        [HAK_FORK_REGISTERING] = "being registered",
    };
    say(fd, "hakmem: fork handlers: %s\n", fork_states[hak_fork_handlers_state()]);
    for (unsigned c = HAK_CLASS_FIRST; c < s->nclasses; c++) {
        const struct hak_stats_class *k = &s->classes[c];
        if (k->refills)
            say(fd, "hakmem: class %2u (%6u B): refills %llu, carved %llu blocks (%llu KiB)\n", c,
                    (unsigned)k->size, (unsigned long long)k->refills, (unsigned long long)k->carved_blocks,
                    (unsigned long long)(k->carved_blocks * k->size >> 10));
    }
}

HAK_EXPORT void hak_print_stats(void) { print_stats(-1); }

/* To hakmem's own descriptor (base/report.h): by the time a library's
 * destructors run, the program may have closed its stderr. In .text.exit,
 * which the linker puts with the code every process runs, not with the
 * rest of this file (src/meson.build, hakmem_objects). */
__attribute__((destructor, section(".text.exit"))) static void print_stats_at_exit(void) {
    if (atomic_load(&hak_init_state) == 2 && hak_report_wanted()) print_stats(hak_report_fd());
}
