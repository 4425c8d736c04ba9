"""The suite's tiers (``--tier quick|default|full``): which models, modes and batch sizes a session runs when the
user names none, per device kind.

- ``quick``: one model per family, for per-commit CI (at most 3 minutes on one GPU by the estimate);
- ``default``: every family and every workload class of the seed studies, for the nightly run (at most 10 minutes on
  one GPU by the estimate);
- ``full``: the seed studies' zoo and batch sweeps, for a weekly run or a new machine.

A tier is a table per device kind: model -> mode -> batch sizes. ``None`` for a model's rows means every mode it can
run; ``None`` for a mode's batch sizes means the workload's declared batches for the device kind, else the device
kind's (:data:`hwregress.plugin.matrix.DEFAULT_BATCH_SIZES`). A family that runs only some of the tier's models (the
speedup's CPU side is slow) names them in :attr:`Tier.family_models`. How long each tier takes is the tier estimate's
(:mod:`hwregress.plugin.tier_estimate`); docs/running.md, 'Tiers', has the minutes per device class.

``--tier`` composes with everything else: ``--models`` replaces the tier's models (a model the tier holds keeps its
rows, another runs every mode at the defaults), ``--modes`` and ``--batch-sizes`` replace the rows, ``-m`` and ``-k``
deselect, ``-n`` spreads what is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hwregress.hardware.facts import device_kind

Rows = Mapping[str, "tuple[int, ...] | None"]  # mode -> batch sizes (None: the defaults)
Table = Mapping[str, "Rows | None"]  # model -> its rows (None: every mode it can run, at the defaults)

# The workload classes of the seed studies (CNNs from AlexNet to ConvNeXt, vision and text transformers, decoder LMs):
# the default tier keeps one model of each, at least (tests/plugin/test_tiers.py).
WORKLOAD_CLASSES: Mapping[str, str] = {
    "alexnet": "classic CNN", "vgg16": "classic CNN", "vgg19": "classic CNN",
    "resnet18": "residual CNN", "resnet50": "residual CNN", "resnet152": "residual CNN",
    "densenet121": "dense CNN", "mobilenet_v3_small": "mobile CNN", "convnext_tiny": "modern CNN",
    "vit_b_16": "vision transformer", "deit_small": "vision transformer",
    "bert_base": "text encoder", "roberta_base": "text encoder",
    "gpt2": "decoder LM", "llama_1b": "decoder LM",
}


@dataclass(frozen=True)
class Tier:
    """One tier.

    Attributes:
        name: ``quick``, ``default`` or ``full``.
        purpose: what it is for, as the header and the docs say it.
        tables: device kind (``cpu``, ``cuda``, ``mps``) -> :data:`Table`.
        family_models: family -> device kind -> the tier's models that family runs (a family or kind missing here:
            every model of the table).
    """

    name: str
    purpose: str
    tables: Mapping[str, Table]
    family_models: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def table(self, device: str) -> Table:
        """The table of ``device``'s kind (a kind without one: the CUDA table, at that kind's default batches)."""
        kind = device_kind(device)
        if kind in self.tables:
            return self.tables[kind]
        return {model: _rows_at_defaults(rows) for model, rows in self.tables["cuda"].items()}

    def models(self, device: str, family: str | None = None) -> list[str]:
        """The tier's models on ``device``, in table order; those of ``family`` where it names its own."""
        chosen = self.family_models.get(family or "", {}).get(device_kind(device))
        return [model for model in self.table(device) if chosen is None or model in chosen]

    def rows(self, device: str, model: str) -> Rows | None:
        """``model``'s rows on ``device``; None where the tier does not hold the model, or runs every mode."""
        return self.table(device).get(model)


def _rows_at_defaults(rows: Rows | None) -> Rows | None:
    return None if rows is None else dict.fromkeys(rows)


_CNN_SWEEP: Rows = {"train": (32, 64, 128), "infer": (1, 8, 32, 128, 256)}
_ENCODER_SWEEP: Rows = {"train": (8, 32), "infer": (1, 8, 32, 128)}
_CPU_IMAGES: Rows = {"train": (8,), "infer": (1, 8)}

# one model per family (gpt2 only for the modes no image model has); every test of it is one of the default tier's, so a
# per-commit run is judged against the baselines the nightly records
QUICK = Tier("quick", "per-commit CI: one model per family", {
    "cuda": {"resnet50": {"train": (32, 128), "infer": (1, 32)}, "gpt2": {"prefill": (1,), "decode": (1,)}},
    "cpu": {"resnet18": {"train": (8,), "infer": (1,)}, "gpt2": {"decode": (1,)}},
}, family_models={"output-parity": {"cuda": ("resnet50",), "cpu": ("resnet18",), "mps": ("resnet50",)}})

DEFAULT = Tier("default", "nightly: every family and every workload class", {
    "cuda": {
        "alexnet": None,
        "resnet18": {"train": (32,), "infer": (1, 32)},
        "resnet50": None,  # the flagship: every mode and batch (train 32, 128; infer 1, 32, 256)
        "resnet152": {"train": (32,), "infer": (1, 32)},
        "vgg16": {"train": (32,), "infer": (1, 32)},
        "densenet121": {"train": (32, 128), "infer": (1, 32)},
        "mobilenet_v3_small": None,
        "vit_b_16": None,
        "convnext_tiny": {"train": (32, 128), "infer": (1, 32)},
        "bert_base": None,
        "deit_small": None,
        "gpt2": None,
        "llama_1b": {"train": None, "prefill": None, "decode": None},
    },
    "cpu": {"resnet18": None, "mobilenet_v3_small": None, "alexnet": None, "bert_base": {"infer": None},
            "gpt2": {"decode": None}},
}, family_models={"speedup": {"cuda": ("alexnet", "resnet50", "mobilenet_v3_small", "deit_small")}})

FULL = Tier("full", "weekly or a new machine: the seed studies' zoo and batch sweeps", {
    "cuda": {
        **dict.fromkeys(("alexnet", "resnet18", "resnet50", "resnet152", "vgg16", "vgg19", "densenet121",
                         "mobilenet_v3_small", "vit_b_16", "convnext_tiny", "deit_small"), _CNN_SWEEP),
        "bert_base": _ENCODER_SWEEP, "roberta_base": _ENCODER_SWEEP,
        "gpt2": {"train": (8, 16), "infer": (1, 16), "prefill": (1, 8, 32), "decode": (1, 16, 64)},
        "llama_1b": {"train": (4,), "infer": (1, 8), "prefill": (1, 8), "decode": (1, 16)},
    },
    "cpu": {
        **dict.fromkeys(("alexnet", "resnet18", "resnet50", "vgg16", "densenet121", "mobilenet_v3_small",
                         "vit_b_16", "convnext_tiny", "deit_small"), _CPU_IMAGES),
        "bert_base": {"train": None, "infer": (1, 8)}, "roberta_base": {"infer": None},
        "gpt2": {"infer": None, "prefill": None, "decode": None},
    },
})

TIERS: Mapping[str, Tier] = {tier.name: tier for tier in (QUICK, DEFAULT, FULL)}
DEFAULT_TIER = DEFAULT.name


def get(name: str | Tier) -> Tier:
    """The tier called ``name`` (a :class:`Tier` itself: that tier, for a tier of one's own built in code).

    Raises:
        ValueError: no such tier; the message lists the tiers.
    """
    if isinstance(name, Tier):
        return name
    try:
        return TIERS[name]
    except KeyError:
        raise ValueError(f"unknown tier {name!r}; use {', '.join(TIERS)}") from None
