"""Batched beam search (no incremental state: the decoder is re-run on the prefix)."""
import torch

from .data import BOS, EOS, PAD


@torch.no_grad()
def beam_search(model, src, beam=4, max_len_a=1.2, max_len_b=0, min_len_a=0.5, len_penalty=1.0):
    bsz = src.size(0)
    src_lens = src.ne(PAD).sum(1) - 1
    memory, mask = model.encode(src)
    memory = memory.repeat_interleave(beam, 0)
    mask = mask.repeat_interleave(beam, 0)
    max_len = int(max_len_a * src_lens.max().item() + max_len_b) + 1
    min_lens = (min_len_a * src_lens.float()).long().repeat_interleave(beam)
    max_lens = (max_len_a * src_lens.float() + max_len_b).long().repeat_interleave(beam)
    tokens = torch.full((bsz * beam, 1), BOS, dtype=torch.long)
    scores = torch.zeros(bsz, beam)
    scores[:, 1:] = float("-inf")
    scores = scores.view(-1)
    finished = [[] for _ in range(bsz)]
    done = torch.zeros(bsz * beam, dtype=torch.bool)
    for step in range(max_len):
        lprobs = torch.log_softmax(model.decode(tokens, memory, mask)[:, -1], dim=-1)
        lprobs[:, PAD] = float("-inf")
        lprobs[:, BOS] = float("-inf")
        lprobs[step < min_lens, EOS] = float("-inf")
        force = step >= max_lens
        lprobs[force] = float("-inf")
        lprobs[force, EOS] = 0.0
        lprobs[done] = float("-inf")
        lprobs[done, PAD] = 0.0
        cand = (scores.unsqueeze(1) + lprobs).view(bsz, -1)
        top, idx = cand.topk(beam, dim=1)
        beam_idx = (idx // lprobs.size(1)) + torch.arange(bsz).unsqueeze(1) * beam
        word = idx % lprobs.size(1)
        tokens = torch.cat([tokens[beam_idx.view(-1)], word.view(-1, 1)], 1)
        done = done[beam_idx.view(-1)] | word.view(-1).eq(EOS)
        scores = top.view(-1)
        if done.all():
            break
    out = []
    for b in range(bsz):
        best, best_s = None, float("-inf")
        for k in range(beam):
            seq = tokens[b * beam + k, 1:].tolist()
            seq = [t for t in seq if t not in (PAD,)]
            if EOS in seq:
                seq = seq[: seq.index(EOS)]
            s = scores[b * beam + k].item() / max(len(seq), 1) ** len_penalty
            if s > best_s:
                best, best_s = seq, s
        out.append(best)
    return out
