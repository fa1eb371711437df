/* activations.c - elementwise nonlinearities and their derivatives. Each backward is the
 * chain rule for one element: dx = dy · f'(x). They run in place (y may be x, dx may be dy)
 * because an activation's input is usually not needed once its output exists, except where
 * the backward reads x itself (GELU, SiLU): then keep x. */
#include "nn.h"
#include <math.h>
#include <string.h>

/* ReLU: f(x) = max(x, 0), f'(x) = 1 for x > 0 and 0 otherwise (at 0 we pick 0, as torch).
 * Since y > 0 exactly where x > 0, the backward may be handed y instead of x. */
void nn_relu_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void nn_relu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

/* GELU, the exact form: f(x) = x·Φ(x) with Φ the standard normal CDF,
 * Φ(x) = (1 + erf(x/√2)) / 2. Product rule: f'(x) = Φ(x) + x·φ(x), with φ the normal
 * density exp(-x²/2)/√(2π). (The tanh approximation is a different function; we do not
 * use it.) */
#define NN_INV_SQRT2 0.70710678118654752f
#define NN_INV_SQRT_2PI 0.39894228040143268f

void nn_gelu_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * NN_INV_SQRT2));
}

void nn_gelu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float cdf = 0.5f * (1.0f + erff(x[i] * NN_INV_SQRT2));
        float pdf = NN_INV_SQRT_2PI * expf(-0.5f * x[i] * x[i]);
        dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
}

/* SiLU (swish), Llama's gate activation: f(x) = x·σ(x), σ(x) = 1/(1 + e^-x).
 * With σ' = σ(1 - σ): f'(x) = σ + x·σ(1 - σ) = σ·(1 + x(1 - σ)).
 * For very negative x, e^-x overflows to inf and σ becomes exactly 0: no NaN appears. */
static inline float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void nn_silu_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] * sigmoidf(x[i]);
}

void nn_silu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = sigmoidf(x[i]);
        dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

/* tanh, the activation of the small policy and value networks of chapter 12:
 *   f(x) = (e^x - e^-x) / (e^x + e^-x),   f'(x) = 1 - f(x)²
 * so the backward needs only the output y (it reads y, not x, and may run in place).
 *
 * libm's tanhf is a function call per element that the compiler cannot vectorise, and a PPO
 * step on CartPole calls tanh about a thousand times per environment step. So we build it
 * from operations the compiler turns into SIMD code, in three pieces, with no branch:
 *   - |x| >= 9: tanh is 1 to float precision (1 - tanh(9) = 3e-8 < half an ulp of 1).
 *   - |x| >= 0.5: tanh|x| = (1 - u) / (1 + u) with u = e^(-2|x|) in (0, 0.37]. Here 1 - u
 *     loses nothing to cancellation. The exponential is ours too: e^t = 2^n · e^r with
 *     n = round(t / ln 2) and |r| <= ln2 / 2, e^r by its Taylor series to r^7 (the first
 *     term left out is below 6e-9), and 2^n written straight into a float's exponent bits.
 *   - |x| < 0.5: the odd Taylor series x - x³/3 + 2x⁵/15 - ... up to x^17, whose first
 *     missing term is below 1e-8 of tanh(x) there; it keeps tiny x exact where (1-u)/(1+u)
 *     would lose relative precision.
 * Both branches are computed and one is selected, which is what lets the loop vectorise.
 * The result is within 2e-7 of tanh (tests/unit/test_nn_rl.c holds it to that). */
#define NN_LN2_HI 0.693145751953125f        /* ln 2 split so that n·ln2_hi is exact */
#define NN_LN2_LO 1.428606765330187e-06f
#define NN_INV_LN2 1.44269504088896341f

/* e^t for t in [-18, 0]: the range tanh needs (n in [-26, 0], so 2^n is a normal float) */
static inline float exp_nonpositive(float t)
{
    float fn = t * NN_INV_LN2;
    /* round to nearest without rintf (which SSE2 cannot vectorise): adding 1.5·2^23
     * pushes the fraction out of the mantissa, subtracting it brings back the integer */
    fn = (fn + 12582912.0f) - 12582912.0f;
    float r = (t - fn * NN_LN2_HI) - fn * NN_LN2_LO;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720 + r * (1.0f / 5040)))))));
    int32_t bits = ((int32_t)fn + 127) << 23;     /* the float 2^n */
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

static inline uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The choices are made on the bits of |x| with integer compares and masks: a float compare
 * may raise an exception (NaN), which stops the compiler from computing both sides and
 * selecting, and the loop would not vectorise. */
void nn_tanh_forward(float *y, const float *x, size_t n)
{
    const uint32_t nine = 0x41100000u, half = 0x3f000000u, inf = 0x7f800000u;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        uint32_t vb = float_bits(v), sign = vb & 0x80000000u, ab = vb & 0x7fffffffu;
        float a = bits_float(ab < nine ? ab : nine);        /* |x| capped at 9 */
        float u = exp_nonpositive(-2.0f * a);
        float big = (1.0f - u) / (1.0f + u);
        float s = v * v;
        float small = v * (1.0f + s * (-1.0f / 3 + s * (2.0f / 15 + s * (-17.0f / 315 +
                      s * (62.0f / 2835 + s * (-1382.0f / 155925 + s * (21844.0f / 6081075 +
                      s * (-929569.0f / 638512875 + s * (6404582.0f / 10854718875.0f)))))))));
        /* blend with masks, not ?: (the compiler would move each side into a branch) */
        uint32_t m_small = 0u - (uint32_t)(ab < half), m_nan = 0u - (uint32_t)(ab > inf);
        uint32_t out = (float_bits(small) & m_small) | ((float_bits(big) | sign) & ~m_small);
        y[i] = bits_float((vb & m_nan) | (out & ~m_nan));   /* NaN stays NaN */
    }
}

void nn_tanh_backward(float *dx, const float *dy, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}
