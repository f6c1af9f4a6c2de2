"""A tiny tokenizer and language model built in code: no hub, no downloads, a few milliseconds.

transformers and tokenizers are imported inside the functions: importing them takes seconds, which a
run that selects no test using them (`pytest -k sgd`) should not pay."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import BertModel, GPT2LMHeadModel, PreTrainedTokenizerFast

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "rug", "and", "quickly"]


def tokenizer(*, token_type_ids: bool = False) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over WORDS, padding on the left (as generation wants). With
    `token_type_ids`, its encodings carry them too, as BERT-style tokenizers' do."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    names = ["input_ids", "token_type_ids", "attention_mask"] if token_type_ids else ["input_ids", "attention_mask"]
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]",
                                   padding_side="left", model_input_names=names)


def causal_lm() -> GPT2LMHeadModel:
    """A 2-layer GPT-2 over the tokenizer's vocabulary, with the same weights every time."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(WORDS) + 2, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return GPT2LMHeadModel(config).eval()


def encoder() -> BertModel:
    """A 1-layer BERT over the tokenizer's vocabulary, with the same weights every time."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(WORDS) + 2, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    return BertModel(config).eval()
