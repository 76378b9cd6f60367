/* FNV-1a feature hashing of C strings into [1, buckets); bucket 0 is reserved for padding. */
#include <stdint.h>
#include <string.h>

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void fhash_tokens(const char **tokens, int64_t n, uint32_t buckets, int64_t *out) {
    for (int64_t i = 0; i < n; i++) {
        size_t len = strlen(tokens[i]);
        out[i] = 1 + (int64_t)(fnv1a(tokens[i], len) % (buckets - 1));
    }
}
