/* rope.c - rotary position embedding, applied exactly as llama2.c's run.c applies it: inside
 * each head, the adjacent pair (x[2i], x[2i+1]) is a point in the plane turned by the angle
 * pos·θ_i, θ_i = 10000^(-2i/HS). Queries and keys carry their position in that angle, so the
 * dot product q·k depends only on the distance between the two positions. */
#include "transformer.h"
#include <math.h>

/* The tables, in float and by the same formula run.c evaluates at every token (powf, cosf,
 * sinf on floats), so a model trained here sees the same rotations when llama2.c runs it. */
void nn_rope_table(float *cos_t, float *sin_t, int T, int HS)
{
    int half = HS / 2;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            float freq = 1.0f / powf(10000.0f, (float)(2 * i) / (float)HS);
            float angle = (float)t * freq;
            cos_t[(size_t)t * half + i] = cosf(angle);
            sin_t[(size_t)t * half + i] = sinf(angle);
        }
    }
}

/* Rotate every pair of the NX heads of one row by +angle (forward) or -angle (backward: the
 * transpose of a rotation is the rotation the other way, and that is all the gradient of a
 * linear map needs). c and s are the table's row for the row's position. */
static void turn_row(float *row, const float *c, const float *s, int NX, int HS, float sign)
{
    int half = HS / 2;
    for (int h = 0; h < NX; h++) {
        float *v = row + (size_t)h * HS;
        for (int i = 0; i < half; i++) {
            float v0 = v[2 * i], v1 = v[2 * i + 1];
            float si = sign * s[i];
            v[2 * i] = v0 * c[i] - v1 * si;
            v[2 * i + 1] = v0 * si + v1 * c[i];
        }
    }
}

static void rope_turn(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX,
                      int HS, float sign)
{
    size_t half = (size_t)HS / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            turn_row(x + ((size_t)b * T + t) * (size_t)NX * HS, cos_t + (size_t)t * half,
                     sin_t + (size_t)t * half, NX, HS, sign);
}

void nn_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX,
                     int HS)
{
    rope_turn(x, cos_t, sin_t, B, T, NX, HS, 1.0f);
}

void nn_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX,
                      int HS)
{
    rope_turn(dx, cos_t, sin_t, B, T, NX, HS, -1.0f);
}

/* Inference's form: row i is a token at position pos[i] (rows of many sequences mixed). */
void nn_rope_rows(float *x, const float *cos_t, const float *sin_t, const int *pos, int N,
                  int NX, int HS)
{
    size_t half = (size_t)HS / 2;
    for (int i = 0; i < N; i++)
        turn_row(x + (size_t)i * NX * HS, cos_t + (size_t)pos[i] * half,
                 sin_t + (size_t)pos[i] * half, NX, HS, 1.0f);
}
