/* agent.c - the actor-critic of chapter 12's PPO: two separate tanh MLPs on core/nn, the
 * actor giving the logits of a categorical policy and the critic a state's value. The
 * forward keeps each layer's tanh output, which is all the backward needs (tanh' = 1 - y²);
 * the backward is the forward read in reverse, layer by layer. */
#include "rl.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[12] = {
    "actor.0.weight", "actor.0.bias", "actor.2.weight", "actor.2.bias", "actor.4.weight",
    "actor.4.bias", "critic.0.weight", "critic.0.bias", "critic.2.weight", "critic.2.bias",
    "critic.4.weight", "critic.4.bias",
};

int rl_agent_init(rl_agent *ag, int in, int hidden, int actions, uint64_t seed)
{
    memset(ag, 0, sizeof *ag);
    if (in < 1 || hidden < 1 || actions < 1)
        return -1;
    ag->in = in;
    ag->hidden = hidden;
    ag->actions = actions;
    nn_params_init(&ag->p);
    /* [out, in] per layer, torch's layout */
    const int outs[6] = {hidden, hidden, actions, hidden, hidden, 1};
    const int ins[6] = {in, hidden, hidden, in, hidden, hidden};
    for (int l = 0; l < 6; l++) {
        ag->t[2 * l] = nn_params_add2(&ag->p, names[2 * l], outs[l], ins[l]);
        ag->t[2 * l + 1] = nn_params_add1(&ag->p, names[2 * l + 1], outs[l]);
    }
    if (nn_params_alloc(&ag->p, 1) != 0)
        return -1;
    /* gains: √2 for the hidden layers (tanh), 0.01 for the policy head so that the first
     * policy is close to uniform, 1 for the value head; biases stay 0 */
    const float gains[6] = {sqrtf(2.0f), sqrtf(2.0f), 0.01f, sqrtf(2.0f), sqrtf(2.0f), 1.0f};
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    for (int l = 0; l < 6; l++)
        nn_init_orthogonal(ag->p.t[ag->t[2 * l]].data, outs[l], ins[l], gains[l], &r);
    return 0;
}

void rl_agent_fini(rl_agent *ag)
{
    nn_params_fini(&ag->p);
    memset(ag, 0, sizeof *ag);
}

void rl_agent_ws_init(rl_agent_ws *ws, const rl_agent *ag, int cap)
{
    size_t H = (size_t)ag->hidden, c = (size_t)(cap > 0 ? cap : 1);
    memset(ws, 0, sizeof *ws);
    ws->cap = (int)c;
    float *m = mlsys_xcalloc(c * (6 * H + (size_t)ag->actions + 1), sizeof(float));
    ws->ha1 = m;
    ws->ha2 = ws->ha1 + c * H;
    ws->hc1 = ws->ha2 + c * H;
    ws->hc2 = ws->hc1 + c * H;
    ws->dh1 = ws->hc2 + c * H;
    ws->dh2 = ws->dh1 + c * H;
    ws->logits = ws->dh2 + c * H;
    ws->value = ws->logits + c * (size_t)ag->actions;
}

void rl_agent_ws_fini(rl_agent_ws *ws)
{
    free(ws->ha1);
    memset(ws, 0, sizeof *ws);
}

static const float *W(const rl_agent *ag, int i)
{
    return ag->p.t[ag->t[i]].data;
}

/* x[B,in] → tanh(x·W1ᵀ+b1) = h1 → tanh(h1·W2ᵀ+b2) = h2 → h2·W3ᵀ+b3 = out[B,k] */
static void mlp_forward(const rl_agent *ag, int first, const float *x, int B, float *h1,
                        float *h2, float *out, int k)
{
    int H = ag->hidden;
    nn_linear_forward(h1, x, W(ag, first), W(ag, first + 1), B, ag->in, H);
    nn_tanh_forward(h1, h1, (size_t)B * H);
    nn_linear_forward(h2, h1, W(ag, first + 2), W(ag, first + 3), B, H, H);
    nn_tanh_forward(h2, h2, (size_t)B * H);
    nn_linear_forward(out, h2, W(ag, first + 4), W(ag, first + 5), B, H, k);
}

void rl_agent_forward(const rl_agent *ag, rl_agent_ws *ws, const float *obs, int B)
{
    mlp_forward(ag, 0, obs, B, ws->ha1, ws->ha2, ws->logits, ag->actions);
    mlp_forward(ag, 6, obs, B, ws->hc1, ws->hc2, ws->value, 1);
}

void rl_agent_value(const rl_agent *ag, rl_agent_ws *ws, const float *obs, int B, float *value)
{
    mlp_forward(ag, 6, obs, B, ws->hc1, ws->hc2, value, 1);
}

/* The reverse: dout → (W3, b3, dh2) → tanh' → (W2, b2, dh1) → tanh' → (W1, b1). */
static void mlp_backward(rl_agent *ag, int first, const float *x, int B, const float *h1,
                         const float *h2, const float *dout, int k, float *dh1, float *dh2)
{
    int H = ag->hidden;
    nn_tensor *t = ag->p.t;
    const int *ix = ag->t + first;
    nn_linear_backward(dh2, t[ix[4]].grad, t[ix[5]].grad, dout, h2, t[ix[4]].data, B, H, k);
    nn_tanh_backward(dh2, dh2, h2, (size_t)B * H);
    nn_linear_backward(dh1, t[ix[2]].grad, t[ix[3]].grad, dh2, h1, t[ix[2]].data, B, H, H);
    nn_tanh_backward(dh1, dh1, h1, (size_t)B * H);
    nn_linear_backward(NULL, t[ix[0]].grad, t[ix[1]].grad, dh1, x, t[ix[0]].data, B, ag->in,
                       H);
}

void rl_agent_backward(rl_agent *ag, rl_agent_ws *ws, const float *obs, const float *dlogits,
                       const float *dvalue, int B)
{
    if (dlogits)
        mlp_backward(ag, 0, obs, B, ws->ha1, ws->ha2, dlogits, ag->actions, ws->dh1, ws->dh2);
    if (dvalue)
        mlp_backward(ag, 6, obs, B, ws->hc1, ws->hc2, dvalue, 1, ws->dh1, ws->dh2);
}
