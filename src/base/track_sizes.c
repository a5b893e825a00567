/* The sizes the program asked for, kept while memcheck runs (built with
 * -Dvalgrind=enabled only; base/track.h). memcheck is told a block is as
 * long as its request and the rest of its class is no-access, so it names
 * the program's sizes in its reports and sees an overflow into that slack;
 * malloc_usable_size and realloc need the request back, and free needs to
 * know a live block without reading its free mark, which may lie in the
 * slack.
 *
 * An open-addressing table (linear probing, deletion by shifting back),
 * in hakmem's metadata, never malloc's. A key is the block's address with
 * its top bits set, so memcheck's leak search, which scans this mapping
 * too, does not take the table for pointers to the blocks (every leak
 * would look reachable). A table that fills past half is replaced by one
 * twice its size; the old one stays in the metadata region, which is never
 * freed (memory spent under memcheck only). */
#include "base/track.h"
#include "os/os.h"

#include <valgrind/valgrind.h>

int hak_track_sizes_on;

struct slot {
    uintptr_t key;   /* 0: empty */
    size_t size;
};

static hak_spinlock_t lock = HAK_SPINLOCK_INIT;
static struct slot *table;
static size_t mask;       /* slots - 1 */
static size_t used;

static uintptr_t key_of(const void *p) { return (uintptr_t)p ^ HAK_LINK_TAG; }

static size_t home(uintptr_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15u) >> 20) & mask;
}

static size_t find(uintptr_t key) {   /* its slot, or the empty one it would take */
    size_t i = home(key);
    while (table[i].key && table[i].key != key) i = (i + 1) & mask;
    return i;
}

static int grow(void) {
    size_t slots = table ? (mask + 1) * 2 : 4096;
    struct slot *fresh = hak_os_meta_alloc(slots * sizeof *fresh), *old = table;
    if (!fresh) return 0;
    size_t old_slots = table ? mask + 1 : 0;
    table = fresh;
    mask = slots - 1;
    for (size_t i = 0; i < old_slots; i++)
        if (old[i].key) table[find(old[i].key)] = old[i];
    return 1;
}

void hak_track_sizes_init(void) {
    hak_track_sizes_on = RUNNING_ON_VALGRIND ? 1 : 0;
}

void hak_track_size_set(const void *p, size_t size) {
    if (!hak_track_sizes_on || !p) return;
    hak_spin_lock(&lock);
    if ((used + 1) * 2 > (table ? mask + 1 : 0) && !grow()) {
        hak_spin_unlock(&lock);
        return;   /* no memory for the table: the block counts as its class size */
    }
    size_t i = find(key_of(p));
    if (!table[i].key) used++;
    table[i] = (struct slot){ key_of(p), size };
    hak_spin_unlock(&lock);
}

size_t hak_track_size_get(const void *p) {
    if (!hak_track_sizes_on) return SIZE_MAX;
    hak_spin_lock(&lock);
    size_t size = SIZE_MAX;
    if (table) {
        size_t i = find(key_of(p));
        if (table[i].key) size = table[i].size;
    }
    hak_spin_unlock(&lock);
    return size;
}

void hak_track_size_drop(const void *p) {
    if (!hak_track_sizes_on) return;
    hak_spin_lock(&lock);
    size_t i = table ? find(key_of(p)) : 0;
    if (table && table[i].key) {
        used--;
        /* shift back the entries after it that probed past i */
        for (size_t j = (i + 1) & mask; table[j].key; j = (j + 1) & mask) {
            size_t h = home(table[j].key);
            if (((j - h) & mask) >= ((j - i) & mask)) {
                table[i] = table[j];
                i = j;
            }
        }
        table[i].key = 0;
    }
    hak_spin_unlock(&lock);
}

void hak_track_fork_prepare(void) { hak_spin_fork_take(&lock); }
void hak_track_fork_release(void) { hak_spin_fork_release(&lock); }
