/* A box's table of implementations, looked up by name when the options are
 * read (base/options.c): HAKMEM_<BOX>=name picks one at init, the build
 * sets the default. Every implementation hakmem has is listed, built or
 * not, so that a name this build left out is told apart from an unknown
 * one. The tables are in api/boxes.c, the layer that sees every box. */
#ifndef HAK_BOX_H
#define HAK_BOX_H

#include "base/common.h"

struct hak_box_impl {
    const char *name;     /* HAKMEM_<BOX>=name */
    const void *ops;      /* the box's ops table; NULL: not in this build */
    const char *option;   /* the Meson on/off option that builds it; NULL: always built */
};

/* Table entries. For HAK_BOX_OPTIONAL, option is the bare name of the
 * on/off option: config.h defines HAK_BUILT_<option> as 0 or 1 (meson.build,
 * optional_boxes), and a name with no such macro does not compile. */
#define HAK_BOX_ALWAYS(name, ops) { name, &(ops), NULL }
#define HAK_BOX_OPTIONAL(name, ops, option) \
    { name, HAK_BOX_IF_(HAK_BUILT_##option, &(ops)), #option }
#define HAK_BOX_IF_(built, x) HAK_BOX_IF__(built, x)
#define HAK_BOX_IF__(built, x) HAK_BOX_IF_##built(x)
#define HAK_BOX_IF_0(x) NULL
#define HAK_BOX_IF_1(x) (x)
#define HAK_BOX_END { NULL, NULL, NULL }

/* One table per box, each ending with HAK_BOX_END, in api/boxes.c: the
 * layer that sees every box hands them to the options (hak_boxes_attach,
 * api/init.h) before they are read. */

#endif
