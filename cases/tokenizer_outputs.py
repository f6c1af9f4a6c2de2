"""A tokenizer's output left on CPU while the model is on the device.

**Symptom** (in the embedding lookup, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but got index is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)`

**Cause**: a tokenizer called with `return_tensors="pt"` returns CPU tensors (`input_ids`,
`attention_mask`, ...) in a `BatchEncoding`. Moving the model does not move them. The 000 article's
fix moves only `input_ids`: the rest of the encoding still breaks a BERT-style model
(`token_type_ids`), and passing `input_ids` alone silently drops the padding mask (transformers 5
does move a CPU `attention_mask` itself; the docs page has the table).

**Fix**: move the whole encoding: `enc = tokenizer(...).to(model.device)`. `BatchEncoding.to`
moves every tensor in it; `model.generate(**enc)` then runs on the device as well.
"""

from pathlib import Path

import torch

from samedevice import tiny

PROMPTS = ["the cat sat on the mat", "a dog ran"]


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    tokenizer, model = tiny.tokenizer(), tiny.causal_lm().to(device)
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True)  # BUG: the tensors stay on CPU
    with torch.no_grad():
        logits = model(**enc).logits
        generated = model.generate(**enc, max_new_tokens=4, do_sample=False)
    return {"logits": logits.cpu(), "generated": generated.cpu()}
