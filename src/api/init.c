#include "api/init.h"
#include "api/fork.h"
#include "base/options.h"
#include "base/report.h"
#include "base/tls.h"
#include "base/track.h"
#include "front/front.h"
#include "pool/pool.h"
#include "safety/safety.h"
#include "backend/chunk_map.h"
#include "backend/heap.h"
#include "backend/large.h"
#include "backend/superslab.h"
#include "backend/ss_box.h"

#include <pthread.h>
#include <sys/auxv.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* Defaults until init chooses: the boxes work before the environment is
 * read (a free of a foreign pointer can come before any malloc). */
const struct hak_cache_ops *hak_front = &hak_front_tcache;
const struct hak_pool_ops *hak_pool = &hak_pool_none;
const struct hak_safety_ops *hak_safety = &hak_safety_registry;

atomic_int hak_init_state;
static hak_spinlock_t init_lock = HAK_SPINLOCK_INIT;
static pthread_key_t thread_key;
static int thread_key_made;   /* 0: pthread_key_create failed, thread_key is nobody's */

static void thread_exit(void *arg);

/* The hardened box's bins: no room, so every call misses the hit path
 * and reaches the box (safety/safety.h). */
static uint32_t no_room(unsigned cls) {
    (void)cls;
    return 0;
}

/* A build without memcheck annotations under valgrind: memcheck sees none
 * of hakmem's blocks (its own malloc is not the one called), so it reports
 * nothing, and the user should know why. valgrind's preloads name it. */
static void hint_if_valgrind(char **envp) {
#if !HAVE_VALGRIND
    for (char **e = envp; e && *e; e++)
        if (!strncmp(*e, "LD_PRELOAD=", 11) && strstr(*e, "vgpreload")) {
            hak_log("hakmem: running under valgrind, but built without -Dvalgrind=enabled: memcheck sees "
                    "none of hakmem's blocks and reports no leak, overflow or use after free in them\n");
            return;
        }
#else
    (void)envp;
#endif
}

void hak_init_slow(void) {
    hak_spin_lock(&init_lock);
    if (atomic_load_explicit(&hak_init_state, memory_order_relaxed) == 2) {
        hak_spin_unlock(&init_lock);
        return;
    }
    /* Nothing in here may call malloc: the lock is not recursive. */
    hak_boxes_attach();
    hak_options_init(environ);
    hak_report_open();
    hak_track_sizes_init();
    hak_size_class_init();
    hak_ss_class_checks_init();
    hak_front = hak_opt_box(HAK_OPT_FRONT);
    hak_pool = hak_opt_box(HAK_OPT_POOL);
    hak_safety = hak_opt_box(HAK_OPT_SAFETY);
    hak_large_box = hak_opt_box(HAK_OPT_LARGE);
    hak_ss_box = hak_opt_box(HAK_OPT_SUPERSLAB);
    if (hak_safety->hardened) hak_safety->hardened->init();
    hak_cache_limits_init(1, hak_safety->hardened ? no_room : hak_front->capacity);
    hak_cache_limits_init(0, hak_safety->hardened ? no_room : hak_pool->capacity);
    hak_heap_keep_mid_runs = hak_safety->hardened != NULL;
    hak_ss_entry_flag = hak_safety->ss_entry_flag;
    /* a box that checks every free wants no tag on the hit path; the
     * hardened box reads the tags itself, and its init made every class's
     * hit-path check fail */
    hak_tag_window_init(hak_opt(HAK_OPT_TAG_WINDOW) && (!hak_ss_entry_flag || hak_safety->hardened));
    hak_ss_pool_init();
    /* Both can fail only when the process is out of keys or memory; the
     * allocator still works, but says what the program loses. */
    thread_key_made = pthread_key_create(&thread_key, thread_exit) == 0;
    if (!thread_key_made)
        hak_log("hakmem: warning: pthread_key_create failed: the heaps of threads that exit are not "
                "handed on to other threads\n");
    atomic_store_explicit(&hak_init_state, 2, memory_order_release);
    hak_spin_unlock(&init_lock);

    if (hak_opt(HAK_OPT_VERBOSE)) hak_options_print();
    hint_if_valgrind(environ);
}

struct hak_heap *hak_thread_heap(void) {
    struct hak_tls *t = &hak_tls;
    if (HAK_LIKELY(t->state == 1)) return t->heap;
    hak_init();
    hak_fork_thread_setup();
    struct hak_heap *h = hak_heap_acquire();
    if (!h) return NULL;
    t->heap = h;
    hak_cache_thread_init(t);
    t->state = 1;
    /* Registers thread_exit for this thread; may allocate (now served). */
    if (thread_key_made) pthread_setspecific(thread_key, h);
    return h;
}

/* Runs at thread exit (and again if a later destructor allocated). */
static void thread_exit(void *arg) {
    (void)arg;
    struct hak_tls *t = &hak_tls;
    if (t->state != 1) return;
    if (hak_safety->hardened) hak_safety->hardened->thread_exit(t);
    hak_cache_flush_all(t, 1);
    for (unsigned c = 0; c < HAK_NBINS; c++) {
        t->bins[c].head = NULL;
        t->bins[c].room = 0;
        t->bins[c].max = 0;
    }
    t->state = 2;
    hak_heap_abandon(t->heap);
    t->heap = NULL;
}

/* Programs that never allocate still get their options read (and verbose
 * output) once the library is loaded. */
__attribute__((constructor)) static void init_at_load(void) {
    hak_init();
}
