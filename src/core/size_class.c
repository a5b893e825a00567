#include "core/size_class.h"
#include "backend/chunk_map.h"

#define HAK_STEPS8(b) (b) + 16, (b) + 32, (b) + 48, (b) + 64, (b) + 80, (b) + 96, (b) + 112, (b) + 128
#define HAK_QUARTERS(b) (b) + (b) / 4, (b) + (b) / 2, (b) + 3 * (b) / 4, 2 * (b)
const uint32_t hak_class_size[HAK_NCLASS] = {
    0,
    HAK_STEPS8(0u), HAK_STEPS8(128u), HAK_STEPS8(256u), HAK_STEPS8(384u),
    HAK_STEPS8(512u), HAK_STEPS8(640u), HAK_STEPS8(768u), HAK_STEPS8(896u),
    HAK_QUARTERS(1024u), HAK_QUARTERS(2048u), HAK_QUARTERS(4096u),
    HAK_QUARTERS(8192u), HAK_QUARTERS(16384u), HAK_QUARTERS(32768u),
    HAK_QUARTERS(65536u), HAK_QUARTERS(131072u),
};
#undef HAK_QUARTERS
#undef HAK_STEPS8
_Static_assert(HAK_TINY_LAST * 16 == HAK_TINY_MAX, "tiny classes are 16 B steps");


void hak_size_class_init(void) {
    for (unsigned c = HAK_CLASS_FIRST; c < HAK_NCLASS; c++) {
        /* runs of larger classes span several slabs: their block starts
         * depend on the run's first slab, so their frees take the checked
         * slow path (magic 0 always fails) */
        struct hak_class_check *m = &hak_class_magic[c];
        m->run = UINT64_MAX / hak_class_size[c] + 1;
        /* blocks up to a slab's size never cross a slab boundary
         * (backend/superslab.h): their starts are multiples of the size
         * from the slab boundary, which the pointer's low 16 bits give */
        m->start = hak_class_size[c] <= HAK_SLAB_SIZE ? m->run : 0;
    }
    hak_class_magic[HAK_CLASS_INVALID] = (struct hak_class_check){ 0, 0 };
}
