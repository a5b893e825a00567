/* The implementations of every box, by name (base/box.h). Adding one: its
 * file, its line in src/meson.build (or in meson.build's optional_boxes
 * with an on/off option), and its entry here. The order is the order
 * HAKMEM_VERBOSE, the README and hakmem(3) list them in. */
#include "api/init.h"
#include "base/box.h"
#include "base/options.h"
#include "front/front.h"
#include "pool/pool.h"
#include "safety/safety.h"
#include "backend/large.h"
#include "backend/ss_box.h"

#include <stddef.h>

static const struct hak_box_impl front_boxes[] = {
    HAK_BOX_ALWAYS("tcache", hak_front_tcache),
    HAK_BOX_ALWAYS("none", hak_front_none),
    HAK_BOX_END,
};

static const struct hak_box_impl pool_boxes[] = {
    HAK_BOX_OPTIONAL("tls", hak_pool_tls, pool),
    HAK_BOX_ALWAYS("none", hak_pool_none),
    HAK_BOX_END,
};

static const struct hak_box_impl safety_boxes[] = {
    HAK_BOX_ALWAYS("registry", hak_safety_registry),
    HAK_BOX_OPTIONAL("mincore", hak_safety_mincore, mincore),
    HAK_BOX_OPTIONAL("hardened", hak_safety_hardened, hardened),
    HAK_BOX_END,
};

static const struct hak_box_impl large_boxes[] = {
    HAK_BOX_ALWAYS("cached", hak_large_cached),
    HAK_BOX_OPTIONAL("direct", hak_large_direct, direct),
    HAK_BOX_END,
};

static const struct hak_box_impl superslab_boxes[] = {
    HAK_BOX_ALWAYS("pages", hak_ss_pages),
    HAK_BOX_OPTIONAL("hugepage", hak_ss_hugepage, hugepage),
    HAK_BOX_END,
};

void hak_boxes_attach(void) {
    hak_options[HAK_OPT_SUPERSLAB].impls = superslab_boxes;
    hak_options[HAK_OPT_FRONT].impls = front_boxes;
    hak_options[HAK_OPT_POOL].impls = pool_boxes;
    hak_options[HAK_OPT_SAFETY].impls = safety_boxes;
    hak_options[HAK_OPT_LARGE].impls = large_boxes;
}
