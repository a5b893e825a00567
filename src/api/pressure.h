/* Memory pressure (api/pressure.c): the calling thread's cached blocks,
 * its heap's empty runs and SuperSlabs, the large-span cache and the
 * SuperSlab pool's ready SuperSlabs all go back to the OS. Returns 1 if
 * anything did, so that a refused allocation is worth trying again. */
#ifndef HAK_PRESSURE_H
#define HAK_PRESSURE_H

int hak_release_unused(void);
/* malloc_trim: the same, and then the pages of every free slab of every
 * heap (whatever the decay clock says). Returns 1 if anything went back. */
int hak_trim(void);

#endif
