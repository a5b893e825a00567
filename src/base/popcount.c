/* The helper GCC calls for __builtin_popcount when the target has no
 * popcnt instruction (baseline x86-64). libgcc's copy would be linked after
 * every object of the library, at the end of .text, among the code a
 * program of small blocks never runs (src/meson.build, hakmem_objects):
 * the slab counts of the refill and purge paths would then map the last
 * 64 KiB window of the library's text in every process. This one is
 * linked with the hot code. */
#include "base/common.h"

int __popcountdi2(unsigned long long x);

int __popcountdi2(unsigned long long x) {
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (int)((x * 0x0101010101010101ull) >> 56);
}
