/* What the standalone test programs (badfree, fuzz, oom, stress) share and
 * GLib's suites do not need: the allocator entry point under test and size
 * units. A(malloc) is malloc when libhakmem interposes the malloc names,
 * hak_malloc in -Dinterpose=false (sanitizer) builds; meson passes
 * HT_INTERPOSE. */
#ifndef HT_API_H
#define HT_API_H

#include <stddef.h>

#include "hakmem.h"

#ifndef HT_INTERPOSE
#define HT_INTERPOSE 1
#endif
#if HT_INTERPOSE
#define A(fn) fn
#else
#define A(fn) hak_##fn
#endif

/* C23's, which older C libraries do not declare */
void free_sized (void *ptr, size_t size);
void free_aligned_sized (void *ptr, size_t align, size_t size);

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

/* Where a request changes box (docs/DESIGN.md, "Boxes"): up to HT_TINY_MAX the
 * front cache's classes, up to HT_MID_MAX Pool TLS's, above it the large
 * path. Size generators split their ranges here so that each range's
 * checks exercise the box they name. */
#define HT_TINY_MAX ((size_t)1040)
#define HT_MID_MAX (256 * KiB)

#endif
