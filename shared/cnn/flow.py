"""Which tensors of a traced step carry the batch, and the gradient sums its backward does (shared/cnn/zoo.py)."""

from typing import Any

from shared.cnn.op_signatures import OpSignature, accumulation, tensors_of


class Flow:
    """Which tensors of a trace carry the batch (the input and what is computed from it), and how often a gradient
    flows back into each tensor: backward sums the gradients of a tensor used n times n-1 times."""

    # Ops whose output takes only a size from their input: it carries the batch where its first dimension is it.
    FACTORIES = frozenset({"new_empty", "new_zeros", "new_ones", "new_full", "empty", "zeros", "ones", "full",
                           "scalar_tensor", "empty_strided", "expand"})  # fmt: skip

    def __init__(self, x: Any, batch: int) -> None:
        self.batch = batch
        self.kept: list[Any] = [x]  # every tensor seen stays alive, so no id is reused while tracing
        self.batched: set[int] = {id(x)}
        # Per call: the (id, in-place writes) of each input that needs a gradient, of each output, and the outputs.
        self.calls: list[tuple[list[tuple[int, int]], list[tuple[int, int]], list[Any]]] = []
        self.tensor: dict[tuple[int, int], Any] = {}
        self.version: dict[int, int] = {}  # in-place writes per tensor so far

    def carries(self, t: Any) -> bool:
        """Whether a tensor of the trace carries the batch."""
        return id(t) in self.batched

    def note(self, name: str, args: tuple[Any, ...], out: Any) -> None:
        """Account one aten call: mark its outputs that carry the batch, and what it read and wrote."""
        inputs, outputs = tensors_of(args), tensors_of(out)
        self.kept += inputs + outputs
        batched = any(id(t) in self.batched for t in inputs)
        if name.rstrip("_") in self.FACTORIES and not (batched and name == "expand"):
            fresh = [o for o in outputs if o.dim() > 0 and o.shape[0] == self.batch]
            marked = fresh if batched or not inputs or name == "expand" else []
        else:
            marked = outputs if batched else []
        self.batched.update(id(o) for o in marked)
        read = [self._key(t) for t in inputs if t.is_floating_point() and t.requires_grad]
        self.tensor.update({self._key(t): t for t in inputs})
        for o in {id(o): o for o in outputs if any(o is t for t in inputs)}.values():
            self.version[id(o)] = self.version.get(id(o), 0) + 1  # written in place: later uses are of a new value
        self.calls.append((read, [self._key(o) for o in outputs], outputs))

    def _key(self, t: Any) -> tuple[int, int]:
        return id(t), self.version.get(id(t), 0)

    def backward(self) -> tuple[list[OpSignature], set[int]]:
        """What backward does: one gradient sum per use beyond the first of each tensor, and the calls a gradient
        flows back through (by index). A use counts where a gradient comes back through it: the op's outputs need
        one and lead to the loss, so not autograd's own copies of an in-place op's input nor detached outputs."""
        last = next((c for c in reversed(self.calls) if any(o.requires_grad for o in c[2])), None)
        live = set(last[1]) if last else set()  # the loss: backward starts from it
        uses: dict[tuple[int, int], int] = {}
        through: set[int] = set()
        for at in range(len(self.calls) - 1, -1, -1):
            read, written, outputs = self.calls[at]
            if live.isdisjoint(written) or not any(o.requires_grad for o in outputs):
                continue
            through.add(at)
            for key in read:
                live.add(key)
                uses[key] = uses.get(key, 0) + 1
        sums: list[OpSignature] = []
        for key, n in uses.items():
            t = self.tensor[key]
            batched = id(t) in self.batched
            numel = t.numel() // self.batch if batched else t.numel()
            sums += [accumulation(int(numel), batched=batched)] * (n - 1)
        return sums, through
