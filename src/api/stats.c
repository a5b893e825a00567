/* HAKMEM_STATS=1: counters printed at exit. Counters are kept only on miss
 * paths (refill, flush, remote free, mapping), so they cost nothing on a hit
 * and need no switch; the option only decides whether they are printed. */
#include "hakmem.h"
#include "api/fork.h"
#include "api/init.h"
#include "base/options.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "backend/superslab.h"

struct totals { struct hak_heap_stats st; unsigned heaps; size_t bytes_out; };

static void add_heap(struct hak_heap *h, void *arg) {
    struct totals *t = arg;
    const uint64_t *src = (const uint64_t *)&h->st;
    uint64_t *dst = (uint64_t *)&t->st;
    for (size_t i = 0; i < sizeof h->st / sizeof(uint64_t); i++) dst[i] += src[i];
    t->heaps++;
    t->bytes_out += hak_heap_bytes_out(h);
}

HAK_EXPORT void hak_print_stats(void) {
    struct totals t = { 0 };
    hak_heap_foreach(add_heap, &t);
    struct hak_ss_pool_stats ss;
    hak_ss_pool_stats(&ss);
    struct hak_large_stats lg;
    hak_large_stats(&lg);
    const struct hak_heap_stats *s = &t.st;
    hak_log("hakmem: stats: heaps %u; small blocks out %zu KiB (in use or in thread caches); "
            "mapped %zu KiB (SuperSlabs %zu, large spans %zu)\n",
            t.heaps, t.bytes_out >> 10, (ss.live * 2048) + (lg.live_bytes >> 10), ss.live * 2048,
            lg.live_bytes >> 10);
    hak_log("hakmem: caches: misses (refills) %llu bringing %llu blocks, flushes %llu (blocks %llu); "
            "hits are not counted (that would cost on the hit path)\n",
            (unsigned long long)s->refills, (unsigned long long)s->refilled_blocks,
            (unsigned long long)s->flushes, (unsigned long long)s->flushed_blocks);
    hak_log("hakmem: refills from a larger class's runs (instead of a new run): %llu blocks; "
            "from other heaps' runs: %llu blocks; "
            "misses served from the thread's bin of a larger class: %llu\n",
            (unsigned long long)s->borrowed_blocks, (unsigned long long)s->borrowed_remote,
            (unsigned long long)s->standin_blocks);
    hak_log("hakmem: remote: frees %llu in %llu pushes; inbox drains %llu (blocks %llu)\n",
            (unsigned long long)s->remote_blocks, (unsigned long long)s->remote_pushes,
            (unsigned long long)s->inbox_drains, (unsigned long long)s->inbox_blocks);
    hak_log("hakmem: superslab: runs made %llu freed %llu; superslabs acquired %llu released %llu; "
            "pool: mapped %zu reused %zu purged %zu unmapped %zu cached %zu live %zu (%zu MiB)\n",
            (unsigned long long)s->runs_made, (unsigned long long)s->runs_freed,
            (unsigned long long)s->ss_acquired, (unsigned long long)s->ss_released,
            ss.mapped, ss.reused, ss.purged, ss.unmapped, ss.cached, ss.live, ss.live * 2);
    hak_log("hakmem: decay: ticks %llu, pages given back %llu times (%zu of them whole ready SuperSlabs); "
            "purge calls for free slabs over the bound %llu; "
            "idle bins emptied %llu (blocks %llu)\n",
            (unsigned long long)s->decay_ticks, (unsigned long long)s->decay_purges, ss.decayed,
            (unsigned long long)s->dirty_purges, (unsigned long long)s->idle_bins,
            (unsigned long long)s->idle_bin_blocks);
    hak_log("hakmem: hollow runs (free pages inside runs in use given back): passes %llu, "
            "purge calls %llu, blocks made hollow %llu\n",
            (unsigned long long)s->hollowed_runs, (unsigned long long)s->hollow_calls,
            (unsigned long long)s->hollowed_blocks);
    hak_log("hakmem: large: mapped %zu unmapped %zu cache hits %zu (cut from a larger span %zu, a smaller one grown %zu) "
            "remaps %zu; purge calls %zu; live %zu KiB, cached %zu KiB\n",
            lg.mapped, lg.unmapped, lg.cache_hits, lg.splits, lg.grown, lg.remaps, lg.purges, lg.live_bytes >> 10,
            lg.cached_bytes >> 10);
    static const char *const fork_states[] = {
        [HAK_FORK_NOT_YET] = "not registered yet (hakmem not initialised)",
        [HAK_FORK_REGISTERED] = "registered",
        [HAK_FORK_FAILED] = "registration failed",
    };
    hak_log("hakmem: fork handlers: %s\n", fork_states[hak_fork_handlers_state()]);
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++)
        if (s->class_refills[c])
            hak_log("hakmem: class %2u (%6u B): refills %llu, carved %llu blocks (%llu KiB)\n", c,
                    hak_class_size[c], (unsigned long long)s->class_refills[c],
                    (unsigned long long)s->class_carved[c],
                    (unsigned long long)(s->class_carved[c] * hak_class_size[c] >> 10));
}

__attribute__((destructor)) static void print_stats_at_exit(void) {
    if (atomic_load(&hak_init_state) == 2 && hak_opt(HAK_OPT_STATS)) hak_print_stats();
}
