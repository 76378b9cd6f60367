"""Character tokenizer for CTC / attention targets."""
import logging

log = logging.getLogger("tinyasr.text")

VOCABS = {
    "letters": list("abcdefghijklmnopqrstuvwxyz '"),
    "letters+digits": list("abcdefghijklmnopqrstuvwxyz '0123456789"),
}


class CharTokenizer:
    def __init__(self, name="letters"):
        self.specials = ["<blank>", "<sos/eos>"]
        self.tokens = self.specials + VOCABS[name]
        self.stoi = {t: i for i, t in enumerate(self.tokens)}
        self.blank_id = 0
        self.sos_id = self.eos_id = 1
        self.unk_id = len(self.tokens)  # unknown characters map past the last regular symbol

    @property
    def vocab_size(self):
        return len(self.tokens)

    def normalize(self, text):
        return " ".join(text.lower().replace("-", " ").split())

    def encode(self, text):
        return [self.stoi.get(c, self.unk_id) for c in self.normalize(text)]

    def decode(self, ids):
        out = []
        for i in ids:
            if i < len(self.tokens) and i > 1:
                out.append(self.tokens[i])
        return "".join(out)
