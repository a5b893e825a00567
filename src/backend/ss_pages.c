/* The `pages` SuperSlab box (backend/ss_box.h): normal pages. Free slabs
 * go back a stretch at a time and a pool SuperSlab all but its header page,
 * so memory follows the program's use closely; several SuperSlabs are
 * mapped with one call as the process grows (their untouched pages cost
 * nothing until used). */
#include "backend/ss_box.h"
#include "os/os.h"

static void pages_init(void) { }

static void *pages_map(size_t size) { return hak_os_map_aligned(size, HAK_CHUNK_SIZE); }

const struct hak_ss_ops hak_ss_pages = {
    .name = "pages",
    .init = pages_init,
    .map = pages_map,
    .purge = hak_os_purge,
    .unmap = hak_os_unmap,
    .batch = 8,
};
