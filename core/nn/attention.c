/* attention.c - causal multi-head attention with grouped key/value heads (GQA), the core
 * between the projections: for each sequence b and query head h, with g = NH/NKV query heads
 * sharing key/value head h/g,
 *   S = Q_h·K_{h/g}ᵀ / √HS   [T,T]    scores; entries j > i (the future) are masked out
 *   P = softmax(S) per row   [T,T]    saved for the backward
 *   O_h = P·V_{h/g}          [T,HS]
 * q and out are [B,T,NH·HS], k and v [B,T,NKV·HS]: a head is a column block of each row, so
 * every product is one nn_gemm on strided operands and nothing is transposed in memory. */
#include "transformer.h"
#include <math.h>
#include <string.h>

void nn_attention_forward(float *out, float *att, const float *q, const float *k,
                          const float *v, int B, int T, int NH, int NKV, int HS)
{
    int group = NH / NKV, ldq = NH * HS, ldk = NKV * HS;
    float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            int kh = h / group;
            const float *Q = q + (size_t)b * T * ldq + (size_t)h * HS;
            const float *K = k + (size_t)b * T * ldk + (size_t)kh * HS;
            const float *V = v + (size_t)b * T * ldk + (size_t)kh * HS;
            float *P = att + ((size_t)b * NH + h) * T * T;
            float *O = out + (size_t)b * T * ldq + (size_t)h * HS;
            nn_gemm(0, 1, T, T, HS, scale, Q, ldq, K, ldk, 0.0f, P, T);
            for (int i = 0; i < T; i++) {
                float *row = P + (size_t)i * T;
                float mx = row[0];
                for (int j = 1; j <= i; j++)
                    mx = row[j] > mx ? row[j] : mx;
                float sum = 0.0f;
                for (int j = 0; j <= i; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = 1.0f / sum;
                for (int j = 0; j <= i; j++)
                    row[j] *= inv;
                for (int j = i + 1; j < T; j++)   /* the future gets no weight */
                    row[j] = 0.0f;
            }
            nn_gemm(0, 0, T, HS, T, 1.0f, P, T, V, ldk, 0.0f, O, ldq);
        }
    }
}

/* The reverse, per (b, h), with dO the gradient of O_h:
 *   dV_{h/g} += Pᵀ·dO                 the value head sums over the g query heads it serves
 *   dP  = dO·V_{h/g}ᵀ
 *   dS  = P ⊙ (dP - rowsum(dP ⊙ P)) / √HS     softmax backward; masked entries have P = 0,
 *                                              so they get no gradient without a test
 *   dQ_h = dS·K_{h/g}                  dK_{h/g} += dSᵀ·Q_h
 * dq is written; dk and dv are written too (zeroed here, then accumulated over the group).
 * scratch holds one [T,T] block. */
void nn_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, const float *v,
                           int B, int T, int NH, int NKV, int HS)
{
    int group = NH / NKV, ldq = NH * HS, ldk = NKV * HS;
    float scale = 1.0f / sqrtf((float)HS);
    memset(dk, 0, (size_t)B * T * ldk * sizeof(float));
    memset(dv, 0, (size_t)B * T * ldk * sizeof(float));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            int kh = h / group;
            size_t qo = (size_t)b * T * ldq + (size_t)h * HS;
            size_t ko = (size_t)b * T * ldk + (size_t)kh * HS;
            const float *P = att + ((size_t)b * NH + h) * T * T;
            const float *dO = dout + qo;
            float *dP = scratch;
            nn_gemm(1, 0, T, HS, T, 1.0f, P, T, dO, ldq, 1.0f, dv + ko, ldk);
            nn_gemm(0, 1, T, T, HS, 1.0f, dO, ldq, v + ko, ldk, 0.0f, dP, T);
            for (int i = 0; i < T; i++) {
                const float *pr = P + (size_t)i * T;
                float *dr = dP + (size_t)i * T;
                float dot = 0.0f;
                for (int j = 0; j <= i; j++)
                    dot += dr[j] * pr[j];
                for (int j = 0; j <= i; j++)
                    dr[j] = pr[j] * (dr[j] - dot) * scale;
                for (int j = i + 1; j < T; j++)
                    dr[j] = 0.0f;
            }
            nn_gemm(0, 0, T, HS, T, 1.0f, dP, T, k + ko, ldk, 0.0f, dq + qo, ldq);
            nn_gemm(1, 0, T, HS, T, 1.0f, dP, T, q + qo, ldq, 1.0f, dk + ko, ldk);
        }
    }
}
