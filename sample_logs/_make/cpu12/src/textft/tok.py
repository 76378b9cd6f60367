"""Word-level tokenizer built locally (no Hub access on the cluster)."""
import os

from tokenizers import Tokenizer, models, pre_tokenizers, trainers, processors
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]


def train_tokenizer(texts, out_dir, vocab_size=2000):
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=SPECIALS)
    tok.train_from_iterator(texts, trainer=trainer)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    os.makedirs(out_dir, exist_ok=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(out_dir)
    return fast


def load_tokenizer(path):
    return PreTrainedTokenizerFast.from_pretrained(path)
