#include "base/size_class.h"

#define HAK_STEPS8(b) (b) + 16, (b) + 32, (b) + 48, (b) + 64, (b) + 80, (b) + 96, (b) + 112, (b) + 128
#define HAK_QUARTERS(b) (b) + (b) / 4, (b) + (b) / 2, (b) + 3 * (b) / 4, 2 * (b)
#define HAK_EIGHTHS(b) (b) + (b) / 8, (b) + (b) / 4, (b) + 3 * (b) / 8, (b) + (b) / 2, \
    (b) + 5 * (b) / 8, (b) + 3 * (b) / 4, (b) + 7 * (b) / 8, 2 * (b)
#define HAK_PAST_EIGHTHS(b) (b) + (b) / 32, HAK_EIGHTHS(b)
#define HAK_PAST_QUARTERS(b) (b) + (b) / 8, HAK_QUARTERS(b)
const uint32_t hak_class_size[HAK_NCLASS] = {
    0,
    HAK_STEPS8(0u), HAK_STEPS8(128u),
    /* the quarters from 256 to 1024, with 624 and 704 for 640, the
     * multiples of 128 moved one or two 16-byte steps, where their blocks
     * start on most lines of a page (see size_class.h): 384 + 16,
     * 512 + 16, 640 - 16, 768 + 16, 896 + 32, 1024 + 16 */
    320u, 400u, 448u, 528u, 624u, 704u, 784u, 928u, 1040u,
    HAK_PAST_QUARTERS(1024u), HAK_PAST_QUARTERS(2048u),
    HAK_PAST_EIGHTHS(4096u), HAK_PAST_EIGHTHS(8192u), HAK_PAST_EIGHTHS(16384u), HAK_PAST_EIGHTHS(32768u),
    HAK_PAST_QUARTERS(65536u), HAK_PAST_QUARTERS(131072u),
    /* for aligned requests only (size_class.h) */
    320u, 384u, 448u, 512u, 640u, 768u, 896u, 1024u,
};
#undef HAK_PAST_QUARTERS
#undef HAK_PAST_EIGHTHS
#undef HAK_EIGHTHS
#undef HAK_QUARTERS
#undef HAK_STEPS8
_Static_assert(HAK_FINE_LAST * 16 == HAK_FINE_MAX, "fine classes are 16 B steps");
_Static_assert(HAK_MID_LAST + 1 == HAK_ALIGNED_FIRST, "aligned requests' classes come last");

/* Accepts exactly offsets k * d, k < count (see size_class.h). */
struct hak_class_check hak_class_check_make(uint32_t d, uint32_t count) {
    uint64_t mul = UINT64_MAX / d + 1;
    uint64_t e = mul * d;   /* wraps to mul * d - 2^64 */
    return (struct hak_class_check){ mul, e ? (uint64_t)count * e : 1 };
}

uint16_t hak_tiny_bin_offset[HAK_TINY_MAX + 1];
uint16_t hak_mid_bin_offset[HAK_SMALL_MAX >> HAK_MID_GRANULE_SHIFT];

static void bin_tables_init(void) {
    for (size_t n = 1; n <= HAK_TINY_MAX; n++)   /* [0] stays 0: malloc(0) misses */
        hak_tiny_bin_offset[n] = (uint16_t)(hak_tiny_class(n) * HAK_TAG_SCALE);   /* a bin is 16 bytes */
    for (size_t g = 0; g < HAK_SMALL_MAX >> HAK_MID_GRANULE_SHIFT; g++) {
        size_t last = (g + 1) << HAK_MID_GRANULE_SHIFT;   /* every size of the granule has its class */
        hak_mid_bin_offset[g] = (uint16_t)(hak_class_of(last) * HAK_TAG_SCALE);
    }
}

unsigned hak_aligned_class_search(size_t size, size_t align) {
    /* Runs and slabs start on 64 KiB boundaries and a block's offset from
     * one is a multiple of its size, so every block of a class whose size
     * is a multiple of align is aligned: the smallest such class that holds
     * size, of malloc's (in size order) and of those kept for aligned
     * requests. Not malloc's classes between 256 B and 1 KiB: larger
     * classes' blocks, not aligned like theirs, stand in for them
     * (hak_class_stands_in). */
    unsigned best = 0;
    for (unsigned c = hak_class_of(size); c <= HAK_MID_LAST && !best; c++)
        if ((hak_class_size[c] & (align - 1)) == 0 && (c <= HAK_FINE_LAST || c > HAK_TINY_LAST)) best = c;
    for (unsigned c = HAK_ALIGNED_FIRST; c < HAK_NCLASS; c++)
        if (hak_class_size[c] >= size && (hak_class_size[c] & (align - 1)) == 0 &&
            (!best || hak_class_size[c] < hak_class_size[best]))
            best = c;
    return best ? best : HAK_ALIGNED_NONE;
}

uint8_t hak_aligned_tiny[HAK_ALIGNED_LG_MAX - HAK_ALIGNED_LG_MIN + 1][(HAK_TINY_MAX >> 4) + 1];
uint8_t hak_aligned_mid[HAK_ALIGNED_LG_MAX - HAK_ALIGNED_LG_MIN + 1][HAK_MID_LAST + 1];
_Static_assert(HAK_NCLASS < HAK_ALIGNED_NONE, "a class index fits the aligned tables");

/* Every class size is a multiple of 16, so a request and its size rounded
 * up to 16 get the same answer; above HAK_TINY_MAX the classes kept for
 * aligned requests are all smaller, so the answer depends only on the
 * request's class. */
static void aligned_tables_init(void) {
    for (unsigned lg = HAK_ALIGNED_LG_MIN; lg <= HAK_ALIGNED_LG_MAX; lg++) {
        size_t align = (size_t)1 << lg;
        for (size_t u = 0; u <= HAK_TINY_MAX >> 4; u++)
            hak_aligned_tiny[lg - HAK_ALIGNED_LG_MIN][u] = (uint8_t)hak_aligned_class_search(u * 16, align);
        for (unsigned c = HAK_TINY_LAST + 1; c <= HAK_MID_LAST; c++)
            hak_aligned_mid[lg - HAK_ALIGNED_LG_MIN][c] = (uint8_t)hak_aligned_class_search(hak_class_size[c], align);
    }
}

void hak_size_class_init(void) {
    bin_tables_init();
    aligned_tables_init();
}
