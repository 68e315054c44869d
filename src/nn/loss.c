/* Softmax cross-entropy: the loss, the hits and the logits' gradient. */
#include "nn/kernels.h"

#include <math.h>
#include <string.h>

/* One example's loss (log-sum-exp minus its label's logit), its argmax hit,
 * and (d non-NULL) its gradient scaled by inv. */
static double xent_one(const float *z, int32_t label, float *d, size_t K, float inv, unsigned char *hit)
{
    size_t arg = 0;
    for (size_t k = 1; k < K; k++)
        if (z[k] > z[arg])
            arg = k;
    *hit = arg == (size_t)label;
    float m = z[arg];
    double sum = 0;
    for (size_t k = 0; k < K; k++)
        sum += exp((double)(z[k] - m));
    double lse = log(sum) + m;
    if (d) {
        for (size_t k = 0; k < K; k++)
            d[k] = (float)exp((double)z[k] - lse) * inv;
        d[label] -= inv;
    }
    return lse - z[label];
}

/* Examples in blocks: the block's losses in parallel, summed in example
 * order after. A logit costs two exps, weighed as 8 floats of the grain. */
enum { XENT_BLOCK = 1024 };

float herd__softmax_xent(const float *logits, const int32_t *labels, float *dlogits, size_t N,
                         size_t K, size_t *ncorrect)
{
    double total = 0, loss[XENT_BLOCK];
    unsigned char hit[XENT_BLOCK];
    size_t hits = 0;
    float inv = 1.0f / (float)N;
    for (size_t n0 = 0; n0 < N; n0 += XENT_BLOCK) {
        size_t nb = N - n0 < XENT_BLOCK ? N - n0 : XENT_BLOCK;
#pragma omp parallel for if (8 * nb * K >= HERD__PAR_GRAIN) schedule(static)
        for (size_t i = 0; i < nb; i++) {
            size_t n = n0 + i;
            loss[i] = xent_one(logits + n * K, labels[n], dlogits ? dlogits + n * K : NULL, K, inv, &hit[i]);
        }
        for (size_t i = 0; i < nb; i++)
            total += loss[i], hits += hit[i];
    }
    if (ncorrect)
        *ncorrect = hits;
    return (float)(total / (double)N);
}
