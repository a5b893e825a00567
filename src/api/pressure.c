/* The OS refused a mapping: before malloc reports ENOMEM, what the process
 * keeps mapped for reuse goes back, and the call is tried once more. Under
 * an address-space limit (RLIMIT_AS), memory cached for one size range
 * must not starve another: mid-size blocks a thread freed wait in its bins
 * (up to 2 MiB a class), which keep their runs, and each class's current
 * run keeps its SuperSlab mapped, so a large block found no room after the
 * program had freed everything (tests/oom, reuse-after-mid).
 * malloc_trim asks for the same at any time, and for the free slabs that
 * the decay clock would give back later (api/malloc_extras.c). */
#include "api/pressure.h"
#include "base/tls.h"
#include "front/front.h"
#include "backend/heap.h"
#include "backend/transfer.h"
#include "backend/large.h"
#include "backend/superslab.h"

int hak_release_unused(void) {
    struct hak_tls *t = &hak_tls;
    size_t released = 0;
    if (t->state == 1 && t->heap) {
        hak_cache_flush_all(t, 0);
        hak_xfer_send_idle(t->heap, 0);   /* every batch waiting for a thread */
        released += hak_heap_release_unused(t->heap);
    }
    released += hak_heap_release_empty_elsewhere(t->state == 1 ? t->heap : NULL);
    released += hak_large_release_cache();
    released += hak_ss_pool_release_all();
    return released != 0;
}

int hak_trim(void) {
    int released = hak_release_unused();
    struct hak_tls *t = &hak_tls;
    return (hak_heap_purge_all_free(t->state == 1 ? t->heap : NULL) != 0) | released;
}
