/* Process and thread life: set-up on the first call, thread exit (fork: api/fork.h). */
#ifndef HAK_INIT_H
#define HAK_INIT_H

#include "base/common.h"

HAK_DATA atomic_int hak_init_state;   /* 2 once the process is set up */
void hak_init_slow(void);
/* Gives each box option its table of implementations (api/boxes.c);
 * before hak_options_init. */
void hak_boxes_attach(void);

static inline void hak_init(void) {
    if (HAK_UNLIKELY(atomic_load_explicit(&hak_init_state, memory_order_acquire) != 2))
        hak_init_slow();
}

#endif
