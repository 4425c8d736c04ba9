"""Accuracy parity on real data: the handwritten digits that ship inside scikit-learn.

(a) :func:`train_digits` trains a small CNN on ``sklearn.datasets.load_digits()`` (1,797 real 8x8
    images) with a fixed split, fixed seeds and a fixed step budget, and returns the test accuracy.
(b) :func:`output_parity` compares a zoo model's outputs on a device with the CPU fp32 reference for
    the same weights and the same real inputs (digits upsampled to the model's input size).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from hwregress.hardware.facts import device_kind
from hwregress.measure.out_of_memory import out_of_memory_released
from hwregress.measure.precision import quantization
from hwregress.measure.precision.numerics import (
    autocast,
    forward_precision,
    grad_scaler,
    model_for_mode,
    precision,
    runs_in_dtype,
    tf32_flags,
)
from hwregress.workloads import Inputs, Workload, build_on, forward, make_batch

DIGITS_SPLIT_SEED = 0
DIGITS_TEST_FRACTION = 0.25
DIGITS_STEPS = 300
DIGITS_BATCH = 64

# Relative L2 error ||out - ref|| / ||ref|| tolerated per numeric mode. fp32 differs from the CPU only
# by reduction order and algorithm choice; TF32 keeps 10 mantissa bits, bf16 7, fp16 10 (with a
# narrower range), and the error grows with depth. Deliberately loose bounds for bugs, not for noise.
OUTPUT_TOLERANCE = {"fp32": 1e-3, "tf32": 2e-2, "fp16": 5e-2, "bf16": 1e-1, **quantization.PARITY_TOLERANCE}


def digits_cnn() -> nn.Module:
    """The digits classifier: two 3x3 convolutions (32, 64 channels), 2x2 max-pool, 128-unit MLP, 10
    classes; input ``[N, 1, 8, 8]``."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, test images, test labels): images ``[N, 1, 8, 8]`` scaled to
    [0, 1], a stratified 75/25 split with ``random_state=0``."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=DIGITS_TEST_FRACTION, random_state=DIGITS_SPLIT_SEED, stratify=labels
    )
    return train_x, train_y, test_x, test_y


def train_digits(device: str, dtype: str = "fp32", seed: int = 0, steps: int = DIGITS_STEPS) -> float:
    """Train :func:`digits_cnn` on ``device`` for ``steps`` Adam steps (lr 1e-3, batch 64, batches drawn
    with a CPU generator seeded by ``seed``) and return its accuracy on the held-out split (fraction).

    ``dtype``'s TF32 flags hold for the whole training and evaluation (backward and optimizer steps
    included); autocast covers forward and loss; fp16 on CUDA scales the loss (:func:`grad_scaler`).
    """
    torch.manual_seed(seed)
    model = digits_cnn().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = grad_scaler(device, dtype)
    train_x, train_y, test_x, test_y = digits_split()
    train_x, train_y = train_x.to(device), train_y.to(device)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    with tf32_flags(dtype):
        for _ in range(steps):
            index = torch.randint(0, len(train_x), (DIGITS_BATCH,), generator=generator).to(device)
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, dtype):
                loss = nn.functional.cross_entropy(model(train_x[index]).float(), train_y[index])
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    model.eval()
    with torch.no_grad(), precision(device, dtype):
        predictions = model(test_x.to(device)).float().argmax(dim=1).cpu()
    return float((predictions == test_y).float().mean())


def real_images(workload: Workload, count: int = 8) -> torch.Tensor:
    """``count`` digits upsampled (bilinear) to ``workload.input_shape`` and standardized per channel:
    real images for output parity, ``[count, *input_shape]``."""
    _, _, test_x, _ = digits_split()
    channels, height, width = workload.input_shape
    images = nn.functional.interpolate(test_x[:count], size=(height, width), mode="bilinear", align_corners=False)
    images = images.repeat(1, channels, 1, 1)
    return (images - images.mean()) / images.std()


@dataclass(frozen=True)
class OutputParity:
    """Device outputs vs the CPU fp32 reference.

    Attributes:
        relative_error: ||out - ref||_2 / ||ref||_2 over the whole logits tensor.
        max_abs_error: largest absolute logit difference.
        tolerance: the relative error allowed for the dtype.
        top1_agreement: fraction of samples whose argmax agrees.
        decisive_agreement: the same, counting a disagreement only where the reference's top-1 margin
            exceeds twice that sample's max abs error (a flip inside the numeric error is no bug).
        logits: values compared on each side (samples x classes, or x positions for a causal LM).
        nonfinite: NaN or inf values among the device's logits.
        reference_nonfinite: NaN or inf values among the CPU fp32 reference's logits.

    A sample whose logits are not all finite on either side agrees with nothing: NaN logits give an argmax as any
    others do, and two NaN rows would read as agreement.
    """

    relative_error: float
    max_abs_error: float
    tolerance: float
    top1_agreement: float
    decisive_agreement: float
    logits: int = 0
    nonfinite: int = 0
    reference_nonfinite: int = 0

    @property
    def finite(self) -> bool:
        return self.nonfinite == 0 and self.reference_nonfinite == 0

    @property
    def ok(self) -> bool:
        return self.finite and self.relative_error <= self.tolerance and self.decisive_agreement == 1.0

    def failure(self, device: str, dtype: str) -> str | None:
        """Why the outputs of ``device`` in ``dtype`` fail parity, one sentence; None when they pass. Outputs that are
        not finite are said so, with the count on each side, and no agreement is quoted."""
        if not self.finite:
            return (f"outputs are not finite: {self.nonfinite} of {self.logits} logits are NaN or inf on the device "
                    f"({device}, {dtype}), {self.reference_nonfinite} of {self.logits} in the CPU fp32 reference")
        if self.ok:
            return None
        return (f"outputs differ from the CPU fp32 reference: relative error {self.relative_error:.3g} (tolerance "
                f"{self.tolerance:.3g} for {dtype}), top-1 agreement {self.top1_agreement:.3f}, decisive agreement "
                f"{self.decisive_agreement:.3f} (must be 1)")


PARITY_TOKENS = 64  # tokens per sequence compared: every layer and position type is exercised, at CPU cost
PARITY_SAMPLES = 8  # images or sequences compared: the batch of output parity's record


def parity_inputs(workload: Workload, count: int = PARITY_SAMPLES) -> Inputs:
    """The inputs output parity compares on: real images (:func:`real_images`) for image models; for text
    models ``count`` sequences of ``PARITY_TOKENS`` fixed-seed token ids (no text corpus ships offline; the
    comparison is of the same arithmetic on two devices, which random ids exercise as well as words)."""
    if workload.input_kind == "tokens":
        return make_batch(workload, count, "cpu", seed=1234, seq_len=min(PARITY_TOKENS, workload.seq_len or 1))[0]
    return real_images(workload, count)


def tolerance_for(workload: Workload, dtype: str) -> float:
    """The relative L2 error allowed for ``workload`` in ``dtype``: the workload's own figure where it
    declares one (deep transformers accumulate more rounding error than CNNs), else :data:`OUTPUT_TOLERANCE`."""
    return float(workload.parity_tolerance.get(dtype, OUTPUT_TOLERANCE[dtype]))



def _to(inputs: Inputs, device: str) -> Inputs:
    return {k: v.to(device) for k, v in inputs.items()} if isinstance(inputs, dict) else inputs.to(device)


@dataclass(frozen=True)
class CpuReference:
    """The CPU fp32 side of output parity for one workload and seed: the seeded model (eval mode, on the CPU),
    the inputs (:func:`parity_inputs`) and its logits (fp32, the model's output shape)."""

    workload: Workload
    seed: int
    model: nn.Module
    inputs: Inputs
    logits: torch.Tensor


class CpuReferences:
    """Output parity's CPU references of one session, each built and run once per workload and seed.

    Every dtype of a model compares with the same CPU fp32 reference, and a session's tests of one model run one
    after another (the matrix's model-major order), so the latest reference is kept and an older one dropped:
    Llama 3.2 1B's reference holds 5 GB of host memory. The cache lives in one process; under xdist each worker
    that runs output parity builds its own (the weights it copies to its device must be in its memory anyway).
    """

    def __init__(self) -> None:
        self._latest: CpuReference | None = None

    def get(self, workload: Workload, seed: int = 0, build_device: str = "cpu") -> CpuReference:
        """The reference of ``workload`` and ``seed``: built (``torch.manual_seed(seed)``, then
        :func:`hwregress.workloads.build_on` ``build_device``, the weights then moved to the CPU) and run in fp32 on
        the CPU on :func:`parity_inputs` under ``torch.no_grad`` the first time, reused after (whatever device a
        later test names: the weights are the reference's either way).

        Building on the device under test draws the random weights there in milliseconds, where a large model's
        CPU init takes tens of seconds (docs/measured.md, 'Model builds'). The comparison needs the same weights on
        both sides, which the copy gives; the forward pass of the reference always runs on the CPU in fp32.
        """
        latest = self._latest
        if latest is not None and latest.workload is workload and latest.seed == seed:
            return latest
        self._latest = None  # release the previous model before building the next
        torch.manual_seed(seed)
        model = build_on(workload, build_device).to("cpu").eval()
        inputs = parity_inputs(workload)
        with torch.no_grad():
            logits = forward(model, inputs).float()
        self._latest = CpuReference(workload, seed, model, inputs, logits)
        return self._latest


def device_copy(reference: CpuReference, device: str) -> nn.Module:
    """A copy of the reference model on ``device`` with exactly its parameters and buffers, the reference left
    intact (a quantized dtype replaces the copy's layers). On the CPU a ``copy.deepcopy``; elsewhere the workload
    is built on the device (:func:`hwregress.workloads.build_on`, no CPU init and no host copy of the model) and
    every parameter and buffer, persistent or not, is copied in from the reference by name.

    Raises:
        ValueError: the device build's parameters or buffers differ from the reference's in names or shapes (a
            workload whose factory is not deterministic in structure), naming the first difference.
    """
    if device_kind(device) == "cpu":
        return copy.deepcopy(reference.model).to(device)
    target = build_on(reference.workload, device).eval()
    source = dict(_tensors(reference.model))
    destination = dict(_tensors(target))
    if source.keys() != destination.keys():
        different = sorted(source.keys() ^ destination.keys())[0]
        raise ValueError(f"workload {reference.workload.name!r}: its build on {device} has other tensors than the CPU "
                         f"reference ({different!r}); output parity needs one architecture per workload")
    with torch.no_grad():
        for name, tensor in destination.items():
            if tensor.shape != source[name].shape:
                raise ValueError(f"workload {reference.workload.name!r}: {name} is {tuple(tensor.shape)} on {device} "
                                 f"but {tuple(source[name].shape)} in the CPU reference")
            tensor.copy_(source[name])
    return target


def _tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*model.named_parameters(), *model.named_buffers()]


def output_parity(workload: Workload, device: str, dtype: str, seed: int = 0,
                  references: CpuReferences | None = None) -> OutputParity:
    """Run ``workload`` in eval mode on ``device`` in ``dtype`` and on the CPU in fp32 with the same weights
    (seeded init, drawn on ``device``: :meth:`CpuReferences.get`) and the same inputs (:func:`parity_inputs`);
    compare the logits (a causal LM's per-position logits count as one prediction each). ``references`` shares the
    CPU side across the tests of a session (:class:`CpuReferences`); None computes it for this call alone.

    Raises:
        OutOfMemory: an allocation failed on either side (:func:`hwregress.measure.out_of_memory.is_out_of_memory`,
            as throughput classifies it: "out of memory at batch 8 on cuda:0"); the device's memory has been
            released.
    """
    def compare() -> OutputParity:
        reference = (references or CpuReferences()).get(workload, seed, build_device=device)
        return compare_logits(_device_logits(reference, device, dtype), reference.logits,
                              tolerance_for(workload, dtype))

    return out_of_memory_released(compare, device, PARITY_SAMPLES)


def _device_logits(reference: CpuReference, device: str, dtype: str) -> torch.Tensor:
    """The logits of the reference's weights on ``device`` in ``dtype``, as fp32 on the CPU, computed as the timed
    inference window computes them: the model cast to ``dtype`` where that window casts it (a causal LM's bf16/fp16:
    :func:`hwregress.measure.precision.numerics.model_for_mode`, no autocast), else under autocast; a quantized dtype
    prepared with a probe of these inputs (:func:`hwregress.measure.precision.quantization.prepare`).

    Raises:
        QuantizationUnsupported: see :func:`hwregress.measure.precision.quantization.prepare`.
    """
    task = reference.workload.task
    inputs = quantization.cast_inputs(_to(reference.inputs, device), dtype, device)
    device_model = model_for_mode(device_copy(reference, device), task, "infer", dtype)
    device_model, _ = quantization.prepare(device_model, dtype, device, "infer",
                                           probe=lambda model: forward(model, inputs))
    with torch.no_grad(), forward_precision(device, dtype, runs_in_dtype(task, "infer", dtype)):
        return forward(device_model, inputs).float().cpu()


def compare_logits(output: torch.Tensor, reference: torch.Tensor, tolerance: float) -> OutputParity:
    """Compare ``output`` with ``reference`` (the same shape, ``[..., classes]``; each row over the last dimension
    one prediction). See :class:`OutputParity` for the figures and for rows that are not finite."""
    reference_rows, output = reference.reshape(-1, reference.shape[-1]), output.reshape(-1, output.shape[-1])
    finite_rows = torch.isfinite(output).all(dim=1) & torch.isfinite(reference_rows).all(dim=1)
    difference = (output - reference_rows).abs()
    per_sample_error = difference.amax(dim=1)
    top2 = reference_rows.topk(2, dim=1).values
    margin = top2[:, 0] - top2[:, 1]
    agree = (output.argmax(dim=1) == reference_rows.argmax(dim=1)) & finite_rows
    decisive = agree | ((margin <= 2 * per_sample_error) & finite_rows)
    return OutputParity(
        relative_error=float((output - reference_rows).norm() / reference_rows.norm().clamp_min(1e-30)),
        max_abs_error=float(difference.max()),
        tolerance=tolerance,
        top1_agreement=float(agree.float().mean()),
        decisive_agreement=float(decisive.float().mean()),
        logits=output.numel(),
        nonfinite=int((~torch.isfinite(output)).sum()),
        reference_nonfinite=int((~torch.isfinite(reference_rows)).sum()),
    )
