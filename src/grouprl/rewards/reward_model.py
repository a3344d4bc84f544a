"""The ``reward_model`` reward: a frozen sequence-classification model scores each sample.

::

    prompt (as the policy saw it: the rendered chat template) + completion + eos
        ──tokenize (left-truncated to max_length)──► AutoModelForSequenceClassification
        ──► logit at the last token (num_labels 1) ──normalize?──► the sample's score

Used as ``reward.functions: [{name: reward_model, args: {path: builtin:tiny-arith-rm}}]``
(docs/reward-models.md). The text the model reads is the one a run trains on: the
scorer hands this reward the prompt decoded from the very ids the engine was given
(``ReadsPrompts``), never a re-render that could differ, and the completion as decoded,
followed by the model's end-of-sequence token (a reward model reads its score at the last
token: the text ends as its training's did; OpenRLHF's reward-model data appends it too).

Where it runs: each reward worker (``reward.sandbox.workers``) loads its own copy once,
in ``warm_up`` (torch and transformers are imported there, never at this module's import:
the driver stays torch-free for rewards), on ``device``. Each call scores one prompt
group (``DeclaresScope``: group scope without the user writing it) in batches of
``batch_size``. A call that fails (the model cannot load, the device is gone, out of
memory) raises: a reward failure, left out of training per ``reward.on_error``, never a 0.
The config-time checks (path, architecture, labels, tokenizer, device, normalisation
statistics) are in ``reward_model_checks.py``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

Device = Literal["auto", "cpu", "cuda"]

_LOADED: dict[tuple[str, str], Any] = {}
"""The worker's loaded models, by (path, device asked): loaded once per worker process."""
_LOADING = threading.Lock()
"""Held while a model loads: a call that comes while the warm-up (on its own thread, past
``calls.WARM_UP_S``) still loads waits for that load instead of starting a second one."""


@dataclass(frozen=True, kw_only=True)
class RewardModel:
    """Scores (prompt, completion) with a Hugging Face sequence-classification model of
    one label: its logit at the last token, optionally normalised. Callable as a grouprl
    group reward; its fields are ``reward.functions[i].args``."""

    path: str = ""
    """The model: a local directory, ``builtin:NAME`` or a hub name as transformers takes
    it (required; the config check refuses none)."""
    batch_size: int = 32
    """Samples per forward pass."""
    device: Device = "auto"
    """``auto``: the GPU when the reward worker sees one, else the CPU (where verl and
    OpenRLHF put a reward model: on a GPU); ``cuda``: a GPU, refused at config time on a
    machine without one (never silently the CPU); ``cpu``: the CPU."""
    normalize: bool = False
    """Score ``(logit - mean) / std`` with the ``mean`` and ``std`` the model's training
    stored in its ``config.json`` (as OpenRLHF does); a model without them is refused."""
    max_length: int | None = None
    """Tokens the model reads at most: longer texts lose their start (the score is read
    at the end). None: the model's own limit (``max_position_embeddings``)."""

    scope: ClassVar[Literal["group"]] = "group"
    """One call per prompt group (``declares.DeclaresScope``): the group is one batch."""
    reads_prompts: ClassVar[bool] = True
    """The scorer passes ``prompts=``, the rendered prompts (``declares.ReadsPrompts``)."""
    learned: ClassVar[bool] = True
    """A learned signal: the run logs its agreement with ``reward.correct_function``
    (``declares.Learned``, ``scores.agreement``)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"RewardModel(batch_size={self.batch_size}): must be 1 or more")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(
                f"RewardModel(device={self.device!r}): must be 'auto', 'cpu' or 'cuda'"
            )
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"RewardModel(max_length={self.max_length}): must be 2 or more")

    def warm_up(self) -> None:
        """Once per reward worker (``declares.WarmsUp``): import torch and transformers
        and load the model and its tokenizer onto the device."""
        self.loaded()

    def loaded(self) -> Loaded:
        """The model, tokenizer and device of this worker (loaded on first use)."""
        key = (self.path, self.device)
        with _LOADING:
            if key not in _LOADED:
                _LOADED[key] = _load(self.path, self.device)
            return _LOADED[key]

    def __call__(
        self,
        completions: list[str],
        *,
        prompts: list[str] | None = None,
        references: list[Any] | None = None,
        rows: list[dict[str, Any]] | None = None,
        **kwargs: object,
    ) -> list[float]:
        """One score per completion of a prompt group. ``prompts``: the rendered prompt
        of each (the text the policy was given); without them the call fails (a reward
        model that scores the completion alone scores another text than it learned)."""
        if prompts is None:
            raise ValueError(
                "reward_model was called without the prompts: it scores the prompt as the "
                "policy saw it with the completion, which the run's scorer passes "
                "(RewardScorer with a decode); called by hand, pass prompts=[...]"
            )
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        model = self.loaded()
        texts = [p + c + model.eos for p, c in zip(prompts, completions, strict=True)]
        logits: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            logits += model.logits(texts[start : start + self.batch_size], self.max_length)
        if not self.normalize:
            return logits
        if model.mean is None or model.std is None:  # the config check refuses this first
            raise ValueError(f"normalize: {self.path!r} stores no mean and std in config.json")
        return [(x - model.mean) / model.std for x in logits]


@dataclass(frozen=True)
class Loaded:
    """A reward model loaded in a worker: ``logits(texts)``, its eos text and stored
    normalisation (``mean``, ``std``: None where its config has none)."""

    model: Any
    tokenizer: Any
    device: Any
    eos: str
    mean: float | None
    std: float | None
    limit: int

    def logits(self, texts: list[str], max_length: int | None) -> list[float]:
        """The model's logit for each text, read at its last token."""
        import torch

        enc = self.tokenizer(
            texts,
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=min(max_length or self.limit, self.limit),
            add_special_tokens=False,  # the rendered prompt has its own markup already
        ).to(self.device)
        with torch.inference_mode():
            out = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        return out.logits[:, 0].float().tolist()


def _load(path: str, device: Device) -> Loaded:
    """``path`` as a sequence classifier in eval mode on ``device`` (bfloat16 on a GPU,
    float32 on the CPU, as ``grouprl.device``'s auto dtype), and its tokenizer, padding
    on the right and truncating on the left."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from grouprl.assets import resolve_model_path

    local = resolve_model_path(path, key="reward.functions.i.args.path")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"reward_model: device='cuda' but this reward worker sees no GPU (torch "
            f"{torch.__version__}); refused rather than scored on the CPU"
        )
    on_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    where = torch.device("cuda" if on_gpu else "cpu")
    dtype = torch.bfloat16 if on_gpu else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(local)
    tokenizer.padding_side, tokenizer.truncation_side = "right", "left"
    model = AutoModelForSequenceClassification.from_pretrained(local, dtype=dtype)
    model = model.to(where).eval()
    if model.config.pad_token_id is None:  # batches need one to find each row's last token
        model.config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    stored = model.config.to_dict()  # OpenRLHF's keys: mean, std
    limit = stored.get("max_position_embeddings") or 4096
    mean, std = stored.get("mean"), stored.get("std")
    return Loaded(model, tokenizer, where, tokenizer.eos_token or "", mean, std, limit)


reward_model = RewardModel()
"""The registered ``reward_model``: ``args.path`` names the model (required)."""
