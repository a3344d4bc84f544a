"""LoRA adapter pushes (``rollout.lora_push=adapters``): the engine's process keeps the
frozen base weights and merges each push's adapters into them itself, so a push after
the first moves only the adapters.

    first push to a replica (and the first after it restarts or is rebuilt):
        base weights under the base model's names, in the engine's dtype, and every
        adapter (float32), a module's base and adapters in one bucket
          ─► AdapterMerge keeps the base (host memory, engine dtype) and stages
             W = W0 + scaling x B @ A for the adapted modules, W0 for the others
    later pushes: the adapters only (and any trainable non-LoRA weight)
          ─► the same merge from the kept base; the weights no push changes are staged
             from the kept base too (a push stages every weight: all or nothing)

The merge is ``lora_weights.merge_adapter``, the trainer's own: float32 sum, then a cast
to the base's dtype. So an engine in float32, or in bfloat16 over a model whose files are
bfloat16 (the trainer's frozen base is then those bfloat16 values), ends up with exactly
the weights a merged push gives it. A float32 model served by a bfloat16 engine keeps its
base in bfloat16 and can differ by one bfloat16 ulp from the merged push (which rounds
W0 + delta once, from float32). The float32 matmul of B @ A is the same operation in
both places, but a process with other BLAS threads may sum it in another order (a few
float32 ulps of the delta).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from torch import Tensor

from grouprl.lora_weights import adapter_prefix, merge_adapter


class AdapterMerge:
    """The base weights one engine keeps, and the merge of each push into them.

    ``expand`` takes the tensors of one stage call (one bucket) and yields base-named
    tensors for the engine to stage: a module's base weight (kept) and its adapters must
    come in the same call when both come; adapters alone are merged into the kept base.
    The push's last call also yields every kept weight the push did not give, and raises
    if an adapted module got no adapters in this push (it would serve its bare base)."""

    def __init__(self) -> None:
        self.base: dict[str, Tensor] = {}
        self.adapted: set[str] = set()  # module prefixes with adapters
        self._given: set[str] = set()  # base names staged by this push so far
        self._prefixes: set[str] = set()  # adapted modules this push merged
        self._version: int | None = None

    def expand(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        *,
        scaling: float,
        version: int,
        last: bool,
    ) -> Iterator[tuple[str, Tensor]]:
        if self._version != version:
            self._given, self._prefixes, self._version = set(), set(), version
        try:
            plain: dict[str, Tensor] = {}
            adapters: dict[str, dict[str, Tensor]] = {}
            for name, tensor in named_tensors:
                if (found := adapter_prefix(name)) is not None:
                    prefix, which = found
                    adapters.setdefault(prefix, {})[which] = tensor.detach()
                else:
                    plain[name] = tensor
            for name, tensor in plain.items():  # the base (first push) or a trainable weight
                self.base[name] = tensor.detach().clone()
            for prefix, pair in adapters.items():
                name = f"{prefix}.weight"
                if name not in self.base:
                    raise ValueError(
                        f"an adapters-only weight push (rollout.lora_push=adapters) reached an "
                        f"engine without the base weight {name!r}: the replica lost its base "
                        "(restarted?) or the push's buckets split a module from its adapters"
                    )
                if set(pair) != {"A", "B"}:
                    raise ValueError(f"LoRA push gives {sorted(pair)} of {prefix!r}: needs A and B")
                self.adapted.add(prefix)
                self._prefixes.add(prefix)
                self._given.add(name)
                yield name, merge_adapter(self.base[name], pair["A"], pair["B"], scaling=scaling)
            for name, tensor in plain.items():
                if name.removesuffix(".weight") not in adapters:
                    self._given.add(name)
                    yield name, tensor
            if last:
                unmerged = sorted(self.adapted - self._prefixes)
                if unmerged:
                    raise ValueError(
                        f"LoRA push of version {version} has no adapters for {unmerged[:5]} "
                        f"({len(unmerged)} modules): they would serve their base weights alone"
                    )
                for name in sorted(self.base.keys() - self._given):
                    yield name, self.base[name]
                self._version = None
        except BaseException:
            self._version = None  # a failed push starts over
            raise
