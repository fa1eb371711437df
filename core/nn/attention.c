/* attention.c - causal multi-head attention with grouped key/value heads (GQA), the core
 * between the projections: for each sequence b and query head h, with g = NH/NKV query heads
 * sharing key/value head h/g,
 *   S = Q_h·K_{h/g}ᵀ / √HS   [T,T]    scores; entries j > i (the future) are masked out
 *   P = softmax(S) per row   [T,T]    saved for the backward
 *   O_h = P·V_{h/g}          [T,HS]
 * The forward is one function of one query row (nn_attention_row) that the training forward
 * calls for every row of every sequence and inference (core/llm/infer.c) for every row of a
 * step, reading keys and values where the KV cache's map put them: one attention, the same
 * arithmetic in both, whatever GEMM kernel runs the projections around it. The backward
 * works on whole [T,T] blocks with nn_gemm (it only exists in training). q and out are
 * [B,T,NH·HS], k and v [B,T,NKV·HS]: a head is a column block of each row. */
#include "transformer.h"
#include <math.h>
#include <string.h>

/* One query row over npos keys and values, per key/value head g: the scores of its group's
 * query heads against each key (q·k / √HS with nn_dot, the key fetched once for the group),
 * then a softmax per head (the maximum subtracted first, so exp never overflows; the sum of
 * the exponentials in eight partial sums), then the probability-weighted sum of the values,
 * eight output features at a time held in registers while the positions stream past (each
 * feature sums its positions in increasing order). Where the CPU has AVX2 a second copy of
 * this function, compiled for it, runs instead (chosen when the program loads): the same
 * operations in the same order on wider registers, so the same bits (no fused multiply-add:
 * C11 mode forbids the compiler to contract a·b + c). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void nn_attention_row(float *out, float *att, size_t att_stride, const float *q,
                      const float *k, const float *v, size_t ld, const int *rows, int npos,
                      int NH, int NKV, int HS)
{
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    for (int g = 0; g < NKV; g++) {
        size_t goff = (size_t)g * HS;
        for (int t = 0; t < npos; t++) {
            const float *kt = k + (size_t)(rows ? rows[t] : t) * ld + goff;
            for (int j = 0; j < group; j++) {
                int h = g * group + j;
                att[(size_t)h * att_stride + t] = nn_dot(q + (size_t)h * HS, kt, HS) * scale;
            }
        }
        for (int j = 0; j < group; j++) {
            float *a = att + (size_t)(g * group + j) * att_stride;
            float mx = a[0];
            for (int t = 1; t < npos; t++)
                mx = a[t] > mx ? a[t] : mx;
            float part[8] = {0};
            int t = 0;
            for (; t + 8 <= npos; t += 8)
                for (int u = 0; u < 8; u++) {
                    a[t + u] = expf(a[t + u] - mx);
                    part[u] += a[t + u];
                }
            for (int u = 0; t + u < npos; u++) {
                a[t + u] = expf(a[t + u] - mx);
                part[u] += a[t + u];
            }
            float sum = ((part[0] + part[4]) + (part[2] + part[6])) +
                        ((part[1] + part[5]) + (part[3] + part[7]));
            float inv = 1.0f / sum;
            for (t = 0; t < npos; t++)
                a[t] *= inv;
        }
        for (int j = 0; j < group; j++) {
            const float *a = att + (size_t)(g * group + j) * att_stride;
            float *o = out + (size_t)(g * group + j) * HS;
            int i0 = 0;
            for (; i0 + 8 <= HS; i0 += 8) {
                float acc[8] = {0};
                for (int t = 0; t < npos; t++) {
                    const float *vt = v + (size_t)(rows ? rows[t] : t) * ld + goff + i0;
                    for (int u = 0; u < 8; u++)
                        acc[u] += a[t] * vt[u];
                }
                memcpy(o + i0, acc, sizeof acc);
            }
            for (; i0 < HS; i0++) {
                float acc = 0.0f;
                for (int t = 0; t < npos; t++)
                    acc += a[t] * v[(size_t)(rows ? rows[t] : t) * ld + goff + i0];
                o[i0] = acc;
            }
        }
    }
}

/* Row i of sequence b attends to rows 0..i of the same sequence; its probabilities land in
 * row i of each head's [T,T] block, the future's entries set to zero for the backward. */
void nn_attention_forward(float *out, float *att, const float *q, const float *k,
                          const float *v, int B, int T, int NH, int NKV, int HS)
{
    size_t ldq = (size_t)NH * HS, ldk = (size_t)NKV * HS, TT = (size_t)T * T;
    for (int b = 0; b < B; b++) {
        const float *kb = k + (size_t)b * T * ldk, *vb = v + (size_t)b * T * ldk;
        float *ab = att + (size_t)b * NH * TT;
        for (int i = 0; i < T; i++) {
            size_t row = (size_t)b * T + i;
            nn_attention_row(out + row * ldq, ab + (size_t)i * T, TT, q + row * ldq, kb, vb,
                             ldk, NULL, i + 1, NH, NKV, HS);
            for (int h = 0; i + 1 < T && h < NH; h++)
                memset(ab + h * TT + (size_t)i * T + i + 1, 0,
                       (size_t)(T - 1 - i) * sizeof(float));
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
