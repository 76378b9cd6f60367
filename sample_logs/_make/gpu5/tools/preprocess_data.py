"""Write a synthetic pre-tokenized corpus in the .bin/.idx format used by pretrain.py.

Stands in for running a real tokenizer over jsonl: documents are Zipf distributed
token ids, each terminated by the end-of-document token (vocab_size - 1).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.path.pardir))
from megatron_lite.data import write_indexed_dataset  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-prefix", required=True)
    parser.add_argument("--num-docs", type=int, default=2000)
    parser.add_argument("--min-doc-len", type=int, default=20)
    parser.add_argument("--max-doc-len", type=int, default=400)
    parser.add_argument("--vocab-size", type=int, default=50257)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    eod = args.vocab_size - 1
    docs = []
    for _ in range(args.num_docs):
        n = int(rng.integers(args.min_doc_len, args.max_doc_len))
        toks = (rng.zipf(1.2, size=n) - 1) % (args.vocab_size - 1)
        docs.append(np.append(toks, eod).astype(np.uint16))
    os.makedirs(os.path.dirname(os.path.abspath(args.output_prefix)), exist_ok=True)
    write_indexed_dataset(args.output_prefix, docs)
    ntok = sum(len(d) for d in docs)
    print("wrote {} documents, {} tokens to {}.bin/.idx".format(len(docs), ntok, args.output_prefix))


if __name__ == "__main__":
    main()
