"""Corpus BLEU (Papineni et al. 2002), uniform weights, no smoothing."""
import collections
import math


def _ngrams(tokens, n):
    return collections.Counter(tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1))


def corpus_stats(hyps, refs, max_order=4):
    matches = [0] * max_order
    totals = [0] * max_order
    hyp_len = ref_len = 0
    for h, r in zip(hyps, refs):
        h, r = h.split(), r.split()
        hyp_len += len(h)
        ref_len += len(r)
        for n in range(1, max_order + 1):
            hn, rn = _ngrams(h, n), _ngrams(r, n)
            matches[n - 1] += sum(min(c, rn[g]) for g, c in hn.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    return matches, totals, hyp_len, ref_len


def bleu_from_stats(matches, totals, hyp_len, ref_len):
    if hyp_len == 0:
        return 0.0
    precisions = [m / t for m, t in zip(matches, totals)]
    if min(precisions) == 0:
        return 0.0
    log_p = sum(math.log(p) for p in precisions) / len(precisions)
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100.0 * bp * math.exp(log_p)


def corpus_bleu(hyps, refs, max_order=4):
    return bleu_from_stats(*corpus_stats(hyps, refs, max_order))
