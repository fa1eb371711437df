/* sums.c - the task of chapter 13's RLHF: the model completes "A + B =" and a rule anyone can
 * read judges the line (llm_sum_check: right, wrong, or not a sum line). Also the wrong
 * answers that make the reward model's rejected lines, and the held-out fifth of problems. */
#include "rlhf.h"
#include <stdio.h>
#include <string.h>

void rl_sum_draw(rl_sum *p, int max_operand, mlsys_rng *r)
{
    uint64_t m = (uint64_t)max_operand + 1;
    p->a = (int)(mlsys_rng_u64(r) % m);
    p->b = (int)(mlsys_rng_u64(r) % m);
    p->op = mlsys_rng_u64(r) % 3 ? '+' : '-';
    if (p->op == '-' && p->b > p->a) {
        int t = p->a;
        p->a = p->b;
        p->b = t;
    }
}

int rl_sum_answer(const rl_sum *p)
{
    return p->op == '+' ? p->a + p->b : p->a - p->b;
}

int rl_sum_prompt(const rl_sum *p, char *out, size_t cap)
{
    return snprintf(out, cap, "%d %c %d =", p->a, p->op, p->b);
}

int rl_sum_judge(const rl_sum *p, const char *resp, size_t n)
{
    char line[96];
    int k = rl_sum_prompt(p, line, sizeof line);
    for (size_t i = 0; i < n && resp[i] != '\n' && k < (int)sizeof line - 1; i++)
        line[k++] = resp[i];
    line[k] = '\0';
    return llm_sum_check(line, (size_t)k);
}

int rl_sum_wrong(const rl_sum *p, mlsys_rng *r)
{
    int c = rl_sum_answer(p), w;
    do {
        int d = c >= 10 && mlsys_rng_u64(r) % 4 == 0 ? 10 : 1 + (int)(mlsys_rng_u64(r) % 3);
        w = mlsys_rng_u64(r) % 2 ? c + d : c - d;
    } while (w < 0 || w == c);
    return w;
}

int rl_sum_held_out(const rl_sum *p)
{
    uint64_t h = (uint64_t)p->a * 1000003u + (uint64_t)p->b * 7919u + (uint64_t)p->op;
    h ^= h >> 13;
    h *= 0x9e3779b97f4a7c15ull;
    return (int)((h >> 32) % 5 == 0);
}
