"""Writes a large, deterministic C file for bench/run's gcc workload.

    python3 gen_big_c.py FUNCTIONS [OUT.c]     (stdout without OUT.c)

Each function mixes what makes an optimising compiler allocate: structs
passed around, loops to unroll and vectorise, switches, calls to small
static functions to inline, and string constants. The same FUNCTIONS
always gives the same file, so gcc's object file is the same under every
allocator.
"""

import sys

HEADER = """\
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct vec { double x, y, z; };
struct rec { int id; unsigned flags; struct vec pos, vel; char name[24]; };

static inline struct vec vadd(struct vec a, struct vec b)
{ struct vec r = { a.x + b.x, a.y + b.y, a.z + b.z }; return r; }
static inline struct vec vscale(struct vec a, double k)
{ struct vec r = { a.x * k, a.y * k, a.z * k }; return r; }
static inline double vdot(struct vec a, struct vec b)
{ return a.x * b.x + a.y * b.y + a.z * b.z; }
"""

FUNC = """\
static unsigned mix_{i}(unsigned h, unsigned v)
{{
    h ^= v + 0x{k1:08x}u + (h << {s1}) + (h >> {s2});
    return h * 0x{k2:08x}u;
}}

double step_{i}(struct rec *r, size_t n, const int *ops, double dt)
{{
    double energy = 0.0;
    unsigned h = {i}u;
    for (size_t j = 0; j < n; j++) {{
        struct rec *p = &r[j];
        switch (ops[j % {m}] & 7) {{
        case 0: p->vel = vadd(p->vel, vscale(p->pos, -{c1}e-3)); break;
        case 1: p->pos = vadd(p->pos, vscale(p->vel, dt)); break;
        case 2: p->flags ^= 1u << (j & 31); break;
        case 3: if (vdot(p->vel, p->vel) > {c2}.0) p->vel = vscale(p->vel, 0.5); break;
        case 4: memcpy(p->name, "{name}", {namelen}); break;
        case 5: h = mix_{i}(h, (unsigned)p->id); break;
        default: p->id += (int)(h & {mask}); break;
        }}
        energy += 0.5 * vdot(p->vel, p->vel) + (double)(p->flags & {mask});
    }}
    for (int k = 0; k < {m}; k++)
        energy += (double)mix_{i}(h, (unsigned)ops[k]) * 1e-9;
    return energy;
}}
"""


def lcg(seed):
    x = seed
    while True:
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        yield x >> 32


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rng = lcg(7)
    out = [HEADER]
    for i in range(n):
        name = "rec%05d" % i
        out.append(FUNC.format(i=i, k1=next(rng), k2=next(rng) | 1, s1=1 + next(rng) % 12,
                               s2=1 + next(rng) % 12, m=4 + next(rng) % 60,
                               c1=1 + next(rng) % 9, c2=10 + next(rng) % 90,
                               name=name, namelen=len(name) + 1, mask=next(rng) % 255 + 1))
    out.append("double (*const step_table[])(struct rec *, size_t, const int *, double) = {\n")
    out.append("".join(f"    step_{i},\n" for i in range(n)))
    out.append("};\n")
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write("".join(out))
    else:
        sys.stdout.write("".join(out))


if __name__ == "__main__":
    main()
