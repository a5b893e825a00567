/* tree: a tree of small nodes built, searched and torn down, again and
 * again (a compiler's syntax trees, a simulation's scene, a parsed
 * document).
 *
 *   tree NODES ROUNDS LOOKUPS SEED
 *
 * Each round inserts NODES random keys into an unbalanced binary search
 * tree; a node is 48 bytes and one in four also gets a name of 8-120 bytes
 * (a separate block, as a symbol's string). Then LOOKUPS random keys are
 * searched, and the tree is freed in post-order (children before parents,
 * the order in which a recursive destructor frees). The checksum of found
 * keys must match between allocators' runs (printed). One op = one malloc
 * or free call; the lookups are timed too, since where an allocator puts
 * nodes decides how many cache lines a search touches. */
#include "bench_common.h"

static const char usage[] =
    "usage: tree NODES ROUNDS LOOKUPS SEED\n"
    "  e.g. tree 100000 10 100000 42\n";

struct node {
    struct node *left, *right;
    uint64_t key;
    char *name;
    uint64_t value;
    uint64_t pad;
};

static uint64_t ops;

static void insert(struct node **root, uint64_t key, bench_rng *r)
{
    struct node **at = root;
    while (*at) {
        if (key == (*at)->key)
            return;
        at = key < (*at)->key ? &(*at)->left : &(*at)->right;
    }
    struct node *n = malloc(sizeof *n);
    if (!n)
        bench_oom(sizeof *n);
    ops++;
    n->left = n->right = NULL;
    n->key = key;
    n->value = key * 3;
    n->name = NULL;
    if ((key & 3) == 0) {
        size_t len = bench_rng_range(r, 8, 120);
        n->name = malloc(len);
        if (!n->name)
            bench_oom(len);
        ops++;
        memset(n->name, 'a' + (int)(key % 26), len - 1);
        n->name[len - 1] = '\0';
    }
    *at = n;
}

static const struct node *find(const struct node *n, uint64_t key)
{
    while (n && n->key != key)
        n = key < n->key ? n->left : n->right;
    return n;
}

/* Post-order without recursion (an unbalanced tree can be deep): each node
 * is freed after both its subtrees, by reusing a parent's pointer to
 * detach the subtree already done. */
static void destroy(struct node *root)
{
    struct node *stack_top = NULL;   /* chain of ancestors through ->pad */
    struct node *n = root;
    while (n || stack_top) {
        if (n) {
            if (n->left) {
                struct node *l = n->left;
                n->left = NULL;
                n->pad = (uint64_t)(uintptr_t)stack_top;
                stack_top = n;
                n = l;
            } else if (n->right) {
                struct node *rt = n->right;
                n->right = NULL;
                n->pad = (uint64_t)(uintptr_t)stack_top;
                stack_top = n;
                n = rt;
            } else {
                free(n->name);
                if (n->name)
                    ops++;
                free(n);
                ops++;
                n = NULL;
            }
        } else {
            n = stack_top;
            stack_top = (struct node *)(uintptr_t)n->pad;
        }
    }
}

static BENCH_NOINLINE uint64_t bench_timed_tree(uint32_t nodes, uint32_t rounds, uint32_t lookups,
                                                bench_rng *rng)
{
    uint64_t sum = 0;
    for (uint32_t r = 0; r < rounds; r++) {
        struct node *root = NULL;
        for (uint32_t i = 0; i < nodes; i++)
            insert(&root, bench_rng_below(rng, nodes * 4u), rng);
        for (uint32_t i = 0; i < lookups; i++) {
            const struct node *n = find(root, bench_rng_below(rng, nodes * 4u));
            if (n)
                sum += n->value + (n->name ? (unsigned char)n->name[0] : 0);
        }
        destroy(root);
    }
    return sum;
}

int main(int argc, char **argv)
{
    bench_check_help(argc, argv, usage);
    if (argc != 5)
        bench_die("%s", usage);
    uint32_t nodes = (uint32_t)bench_arg_u64(argc, argv, 1, 0, usage);
    uint32_t rounds = (uint32_t)bench_arg_u64(argc, argv, 2, 0, usage);
    uint32_t lookups = (uint32_t)bench_arg_u64(argc, argv, 3, 0, usage);
    uint64_t seed = bench_arg_u64(argc, argv, 4, 0, usage);
    if (nodes == 0 || nodes > (1u << 28))
        bench_die("NODES must be 1..2^28\n%s", usage);

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    double t0 = bench_now();
    uint64_t sum = bench_timed_tree(nodes, rounds, lookups, &rng);
    double t1 = bench_now();
    bench_report("tree", ops, t1 - t0, " checksum=%llu", (unsigned long long)sum);
    return 0;
}
