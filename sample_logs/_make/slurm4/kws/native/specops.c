/* specops: small CPU helpers for the log-mel frontend, called through ctypes.
 *
 * smooth_cmvn: 3-tap temporal smoothing with edge replication, followed by
 * per-bin mean/variance normalisation.  x and out are [T, F] row-major float32.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

int specops_version(void) { return 3; }

void specops_smooth_cmvn(const float *x, float *out, unsigned int T, unsigned int F)
{
    /* edge frames are replicated, keep copies of the first and last rows */
    float *pad_lo = malloc(F * sizeof(float));
    float *pad_hi = malloc(F * sizeof(float));
    memcpy(pad_lo, x, F * sizeof(float));
    memcpy(pad_hi, x + (T - 1) * F, F * sizeof(float));

    for (unsigned int t = 0; t < T; t++) {
        const float *prev = t == 0 ? pad_lo : x + (t - 1) * F;
        const float *next = t + 1 == T ? pad_hi : x + (t + 1) * F;
        const float *cur = x + t * F;
        for (unsigned int f = 0; f < F; f++)
            out[t * F + f] = (prev[f] + cur[f] + next[f]) / 3.0f;
    }
    for (unsigned int f = 0; f < F; f++) {
        double s = 0.0, ss = 0.0;
        for (unsigned int t = 0; t < T; t++) {
            double v = out[t * F + f];
            s += v;
            ss += v * v;
        }
        double mean = s / T, var = ss / T - mean * mean;
        double inv = 1.0 / sqrt(var > 1e-10 ? var : 1e-10);
        for (unsigned int t = 0; t < T; t++)
            out[t * F + f] = (float)((out[t * F + f] - mean) * inv);
    }
    free(pad_lo);
    free(pad_hi);
}
