#include "core/size_class.h"

const uint32_t hak_class_size[HAK_NCLASS] = {
    16, 32, 48, 64, 80, 96, 112, 128,
    160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
#define HAK_QUARTERS(b) (b) + (b) / 4, (b) + (b) / 2, (b) + 3 * (b) / 4, 2 * (b)
    HAK_QUARTERS(1024u), HAK_QUARTERS(2048u), HAK_QUARTERS(4096u),
    HAK_QUARTERS(8192u), HAK_QUARTERS(16384u), HAK_QUARTERS(32768u),
    HAK_QUARTERS(65536u), HAK_QUARTERS(131072u),
#undef HAK_QUARTERS
};

uint64_t hak_class_start_magic[HAK_NBINS];
uint64_t hak_class_run_magic[HAK_NCLASS];

void hak_size_class_init(void) {
    for (unsigned c = 0; c < HAK_NCLASS; c++) {
        /* runs of larger classes span several slabs: their block starts
         * depend on the run's first slab, so their frees take the checked
         * slow path (magic 0 always fails) */
        hak_class_run_magic[c] = UINT64_MAX / hak_class_size[c] + 1;
        hak_class_start_magic[c] = hak_class_size[c] <= 4096 ? hak_class_run_magic[c] : 0;
    }
    hak_class_start_magic[HAK_CLASS_INVALID] = 0;
}

/* index: (n + 15) / 16 for n in 0..1024 -> smallest class that fits */
const uint8_t hak_tiny_class_index[(HAK_TINY_MAX >> 4) + 1] = {
    0, 0, 1, 2, 3, 4, 5, 6, 7,             /* 0..128    */
    8, 8, 9, 9, 10, 10, 11, 11,             /* ..256     */
    12, 12, 12, 12, 13, 13, 13, 13,         /* ..384     */
    14, 14, 14, 14, 15, 15, 15, 15,         /* ..512     */
    16, 16, 16, 16, 16, 16, 16, 16,         /* ..640     */
    17, 17, 17, 17, 17, 17, 17, 17,         /* ..768     */
    18, 18, 18, 18, 18, 18, 18, 18,         /* ..896     */
    19, 19, 19, 19, 19, 19, 19, 19,         /* ..1024    */
};
