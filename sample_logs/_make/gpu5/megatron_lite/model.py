"""GPT model built from the tensor-parallel layers."""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import parallel_state as ps
from .tensor_parallel import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    copy_to_tensor_model_parallel_region,
    divide,
    vocab_parallel_cross_entropy,
)


@dataclass
class TransformerConfig:
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    kv_channels: int
    padded_vocab_size: int
    max_position_embeddings: int
    seq_length: int
    position_embedding_type: str = "learned_absolute"
    rotary_base: int = 10000
    layernorm_epsilon: float = 1e-5
    init_method_std: float = 0.02
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    params_dtype: torch.dtype = torch.float
    perform_initialization: bool = True
    tp_comm_overlap: bool = False
    untie_embeddings_and_output_weights: bool = False

    @classmethod
    def from_args(cls, args, **overrides):
        cfg = cls(
            num_layers=args.num_layers,
            hidden_size=args.hidden_size,
            ffn_hidden_size=args.ffn_hidden_size,
            num_attention_heads=args.num_attention_heads,
            kv_channels=args.kv_channels,
            padded_vocab_size=args.padded_vocab_size,
            max_position_embeddings=args.max_position_embeddings,
            seq_length=args.seq_length,
            position_embedding_type=args.position_embedding_type,
            rotary_base=args.rotary_base,
            layernorm_epsilon=args.layernorm_epsilon,
            init_method_std=args.init_method_std,
            hidden_dropout=args.hidden_dropout,
            attention_dropout=args.attention_dropout,
            params_dtype=args.params_dtype,
            tp_comm_overlap=args.tp_comm_overlap,
            untie_embeddings_and_output_weights=args.untie_embeddings_and_output_weights,
        )
        for k, v in overrides.items():
            setattr(cfg, k, v)
        return cfg


class RotaryEmbedding(torch.nn.Module):
    """cos/sin tables are plain attributes so that they never end up in checkpoints."""

    def __init__(self, dim, base, max_seq_len):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        t = torch.arange(max_seq_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos_cached = emb.cos()[:, None, None, :]
        self.sin_cached = emb.sin()[:, None, None, :]

    @staticmethod
    def _rotate_half(x):
        x1, x2 = torch.chunk(x, 2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, t):
        # t: [s, b, np, hn]
        seq_len = t.size(0)
        cos = self.cos_cached[:seq_len].to(t.dtype)
        sin = self.sin_cached[:seq_len].to(t.dtype)
        return t * cos + self._rotate_half(t) * sin


class ParallelAttention(torch.nn.Module):
    def __init__(self, config, layer_number):
        super().__init__()
        self.config = config
        tp = ps.get_tensor_model_parallel_world_size()
        self.hidden_size_per_partition = divide(config.hidden_size, tp)
        self.num_attention_heads_per_partition = divide(config.num_attention_heads, tp)
        self.hidden_size_per_attention_head = config.kv_channels
        self.query_key_value = ColumnParallelLinear(config.hidden_size, 3 * config.hidden_size,
                                                    config=config)
        self.dense = RowParallelLinear(
            config.hidden_size, config.hidden_size, config=config,
            init_std=config.init_method_std / math.sqrt(2.0 * config.num_layers),
            name="layer{}.self_attention.dense".format(layer_number))
        if config.position_embedding_type == "rope":
            self.rotary_pos_emb = RotaryEmbedding(config.kv_channels, config.rotary_base,
                                                  config.seq_length)
        else:
            self.rotary_pos_emb = None

    def forward(self, hidden_states):
        # hidden_states: [s, b, h]
        s, b, _ = hidden_states.shape
        mixed_x_layer = self.query_key_value(hidden_states)
        new_shape = (s, b, self.num_attention_heads_per_partition,
                     3 * self.hidden_size_per_attention_head)
        mixed_x_layer = mixed_x_layer.view(*new_shape)
        query, key, value = torch.split(mixed_x_layer, self.hidden_size_per_attention_head, dim=3)
        if self.rotary_pos_emb is not None:
            query = self.rotary_pos_emb(query)
            key = self.rotary_pos_emb(key)
        # [s, b, np, hn] -> [b, np, s, hn]
        query, key, value = (x.permute(1, 2, 0, 3) for x in (query, key, value))
        context = F.scaled_dot_product_attention(
            query, key, value, is_causal=True,
            dropout_p=self.config.attention_dropout if self.training else 0.0)
        context = context.permute(2, 0, 1, 3).reshape(s, b, self.hidden_size_per_partition)
        return self.dense(context)


class ParallelMLP(torch.nn.Module):
    def __init__(self, config, layer_number):
        super().__init__()
        self.dense_h_to_4h = ColumnParallelLinear(config.hidden_size, config.ffn_hidden_size,
                                                  config=config)
        self.dense_4h_to_h = RowParallelLinear(
            config.ffn_hidden_size, config.hidden_size, config=config,
            init_std=config.init_method_std / math.sqrt(2.0 * config.num_layers),
            name="layer{}.mlp.dense_4h_to_h".format(layer_number))

    def forward(self, hidden_states):
        intermediate = F.gelu(self.dense_h_to_4h(hidden_states))
        return self.dense_4h_to_h(intermediate)


class ParallelTransformerLayer(torch.nn.Module):
    def __init__(self, config, layer_number):
        super().__init__()
        self.layer_number = layer_number
        self.input_layernorm = torch.nn.LayerNorm(config.hidden_size, eps=config.layernorm_epsilon,
                                                  dtype=config.params_dtype)
        self.self_attention = ParallelAttention(config, layer_number)
        self.post_attention_layernorm = torch.nn.LayerNorm(
            config.hidden_size, eps=config.layernorm_epsilon, dtype=config.params_dtype)
        self.mlp = ParallelMLP(config, layer_number)
        self.hidden_dropout = config.hidden_dropout

    def forward(self, hidden_states):
        attn_out = self.self_attention(self.input_layernorm(hidden_states))
        hidden_states = hidden_states + F.dropout(attn_out, self.hidden_dropout, self.training)
        mlp_out = self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states + F.dropout(mlp_out, self.hidden_dropout, self.training)


class TransformerBlock(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [ParallelTransformerLayer(config, i + 1) for i in range(config.num_layers)])
        self.final_layernorm = torch.nn.LayerNorm(config.hidden_size, eps=config.layernorm_epsilon,
                                                  dtype=config.params_dtype)

    def forward(self, hidden_states):
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.final_layernorm(hidden_states)


class Embedding(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(config.padded_vocab_size, config.hidden_size,
                                                      config=config)
        if config.position_embedding_type == "learned_absolute":
            weight = torch.empty(config.max_position_embeddings, config.hidden_size,
                                 dtype=config.params_dtype)
            if config.perform_initialization:
                with torch.no_grad():
                    weight.normal_(0.0, config.init_method_std)
            self.position_embeddings = torch.nn.Embedding(
                config.max_position_embeddings, config.hidden_size, _weight=weight)
        else:
            self.position_embeddings = None

    def forward(self, input_ids, position_ids):
        embeddings = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            embeddings = embeddings + self.position_embeddings(position_ids)
        # [b, s, h] -> [s, b, h]
        return embeddings.transpose(0, 1).contiguous()


class GPTModel(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embedding = Embedding(config)
        self.decoder = TransformerBlock(config)
        if config.untie_embeddings_and_output_weights:
            self.output_layer = ColumnParallelLinear(config.hidden_size, config.padded_vocab_size,
                                                     config=config, bias=False)
        else:
            self.output_layer = None

    def forward(self, input_ids, position_ids, labels):
        hidden_states = self.embedding(input_ids, position_ids)
        hidden_states = self.decoder(hidden_states)
        if self.output_layer is not None:
            logits = self.output_layer(hidden_states)
        else:
            logits = F.linear(copy_to_tensor_model_parallel_region(hidden_states),
                              self.embedding.word_embeddings.weight)
        loss = vocab_parallel_cross_entropy(logits.float(), labels.transpose(0, 1).contiguous())
        return loss.transpose(0, 1).contiguous()

    @torch.no_grad()
    def init_weights(self):
        """Used when the model was materialized from the meta device."""
        std = self.config.init_method_std
        out_std = std / math.sqrt(2.0 * self.config.num_layers)
        for name, module in self.named_modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, (ColumnParallelLinear, RowParallelLinear)):
                s = out_std if isinstance(module, RowParallelLinear) else std
                module.weight.normal_(0.0, s)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, (VocabParallelEmbedding, torch.nn.Embedding)):
                module.weight.normal_(0.0, std)
