/* tensor_parallel.c - ch08/minimal-inference-server --tensor-parallel-size T: whether the
 * lab's model splits over T ranks (chapter 6's split keeps whole heads on a rank, so T must
 * divide the heads, the key/value heads and the MLP's hidden units), and the banner line
 * that says what each rank computes. The split itself is the engine's (opts.tp). */
#include "ch08.h"

int ch08_tp_check(const llm_config *c, int T)
{
    if (T <= 1 || (c->n_heads % T == 0 && c->n_kv_heads % T == 0 && c->hidden_dim % T == 0))
        return 0;
    char ok[64] = "";
    size_t k = 0;
    for (int t = 1; t <= 8; t++)
        if (c->n_heads % t == 0 && c->n_kv_heads % t == 0 && c->hidden_dim % t == 0)
            k += (size_t)snprintf(ok + k, sizeof ok - k, "%s%d", k ? ", " : "", t);
    fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: --tensor-parallel-size %d must "
            "divide the model's %d heads, %d key/value heads and %d MLP hidden units (a rank "
            "holds whole heads); this model splits over %s\n", T, c->n_heads, c->n_kv_heads,
            c->hidden_dim, ok);
    return 2;
}

void ch08_tp_banner(FILE *out, const llm_config *c, mlsys_comm *tp)
{
    int T = mlsys_size(tp);
    fprintf(out, "Tensor parallelism over %d ranks, %s backend: each computes %d of the %d "
            "heads (%d of %d\nkey/value heads) and %d of the %d MLP units of every layer, two "
            "all-reduces per\nlayer; rank 0 schedules and samples.\n", T, mlsys_backend_name(tp),
            c->n_heads / T, c->n_heads, c->n_kv_heads / T, c->n_kv_heads, c->hidden_dim / T,
            c->hidden_dim);
}
