"""Build small causal LMs from a YAML/dict config (weights are trained from scratch)."""
import yaml
from transformers import AutoConfig, AutoModelForCausalLM


def load_model_config(path_or_dict, vocab_size=None, **overrides):
    if isinstance(path_or_dict, str):
        with open(path_or_dict) as f:
            cfg = yaml.safe_load(f)
    else:
        cfg = dict(path_or_dict)
    model_type = cfg.pop("model_type")
    if vocab_size is not None:
        cfg["vocab_size"] = vocab_size
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    return AutoConfig.for_model(model_type, **cfg)


def build_model(path_or_dict, tokenizer, attn_implementation=None, **overrides):
    config = load_model_config(
        path_or_dict,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **overrides,
    )
    kwargs = {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    return AutoModelForCausalLM.from_config(config, **kwargs)
