"""Published interconnect figures beside the measured bus ceilings (``h2d``, ``d2h``, ``p2p``, ``allreduce``).

PCIe: the link's generation and width come from NVML, the bandwidth per direction from the PCI-SIG PCI
Express Base Specifications (rev. 1.0a-6.0): transfer rate per lane times the line encoding's payload
share (8b/10b up to Gen2, 128b/130b Gen3-Gen5, Gen6's 256-byte FLIT of which 242 bytes carry TLPs and
DLLPs, the rest CRC and FEC). Transaction-layer overhead (TLP headers, flow control) is not subtracted,
so a measured copy reaches about 80-90% of the figure.

NVLink: figures by GPU name from NVIDIA's product datasheets and architecture whitepapers
(:data:`NVLINK_RULES`). The datasheets print the total over both directions per GPU ("900 GB/s"); a copy
one way, or nccl-tests' bus bandwidth of an all-reduce (nccl-tests doc/PERFORMANCE.md, "Bus bandwidth"),
is comparable with half of it, the per-direction figure. NVML tells whether the links are up
(:func:`active_nvlinks`).

Bandwidths are in GB/s (1e9 bytes/s), as the ceilings measure them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hwregress.hardware.facts import device_kind
from hwregress.hardware.nvml import NvmlDevice
from hwregress.hardware.roofline import name_tokens

# generation -> (transfer rate in GT/s per lane, payload share of the line encoding, encoding, specification)
PCIE_GENERATIONS: dict[int, tuple[float, float, str, str]] = {
    1: (2.5, 8 / 10, "8b/10b", "PCI Express Base Specification 1.0a"),
    2: (5.0, 8 / 10, "8b/10b", "PCI Express Base Specification 2.0"),
    3: (8.0, 128 / 130, "128b/130b", "PCI Express Base Specification 3.0"),
    4: (16.0, 128 / 130, "128b/130b", "PCI Express Base Specification 4.0"),
    5: (32.0, 128 / 130, "128b/130b", "PCI Express Base Specification 5.0"),
    6: (64.0, 242 / 256, "PAM4 FLIT (242 of 256 bytes)", "PCI Express Base Specification 6.0"),
}
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)  # the link widths the specifications define
INTERCONNECT_CEILINGS = ("h2d", "d2h", "p2p", "allreduce")
_DEVICE_CEILINGS = ("gemm", "copy")  # their published roofs are hwregress.hardware.roofline's


def pcie_bandwidth_gbps(generation: int, width: int) -> float:
    """Published usable bandwidth of a PCIe link per direction in GB/s after line encoding:
    lanes x GT/s x encoding payload share / 8 bits (Gen4 x16: 16 x 16 x 128/130 / 8 = 31.5 GB/s; Gen5 x16:
    63.0 GB/s). Per lane: Gen1 0.25, Gen2 0.5, Gen3 0.985, Gen4 1.969, Gen5 3.938, Gen6 7.563 GB/s
    (PCI-SIG PCI Express Base Specifications; TLP overhead not subtracted, see the module docstring).

    Raises:
        ValueError: ``generation`` not 1-6 or ``width`` not a width the specifications define.
    """
    if generation not in PCIE_GENERATIONS:
        raise ValueError(f"PCIe generation {generation!r} is unknown; use 1-{max(PCIE_GENERATIONS)} "
                         "(NVML's nvmlDeviceGetMaxPcieLinkGeneration)")
    if width not in PCIE_WIDTHS:
        raise ValueError(f"PCIe link width x{width!r} is not one the specification defines; use one of "
                         f"{', '.join(f'x{w}' for w in PCIE_WIDTHS)} (NVML's nvmlDeviceGetMaxPcieLinkWidth)")
    transfers, payload, _, _ = PCIE_GENERATIONS[generation]
    return width * transfers * payload / 8


@dataclass(frozen=True)
class PcieLink:
    """The PCIe link of one GPU as NVML reports it.

    Attributes:
        max_generation, max_width: the best link the GPU and its slot allow together
            (``nvmlDeviceGetMaxPcieLinkGeneration``/``Width``: a Gen5 x16 GPU in a Gen4 x8 slot reports 4, 8).
            The published figure uses these.
        current_generation, current_width: the link as trained now (``nvmlDeviceGetCurrPcieLinkGeneration``/
            ``Width``), None where unreadable. An idle GPU downtrains its link to save power (Gen1 at idle is
            common), so a lower current link at query time is no fault; one that stays low under a copy is.
    """

    max_generation: int
    max_width: int
    current_generation: int | None
    current_width: int | None

    @property
    def published_gbps(self) -> float | None:
        """:func:`pcie_bandwidth_gbps` of the max link, None when NVML reported a generation or width
        outside the specifications' (a virtual GPU may report 0)."""
        try:
            return pcie_bandwidth_gbps(self.max_generation, self.max_width)
        except ValueError:
            return None

    def describe(self) -> str:
        """E.g. ``"PCIe Gen5 x16 (link now Gen1 x16)"``."""
        now = (f" (link now Gen{self.current_generation} x{self.current_width})"
               if self.current_generation is not None and self.current_width is not None else "")
        return f"PCIe Gen{self.max_generation} x{self.max_width}{now}"

    def facts(self) -> dict[str, Any]:
        """The link as JSON-able record facts."""
        return {"pcie_max_generation": self.max_generation, "pcie_max_width": self.max_width,
                "pcie_current_generation": self.current_generation, "pcie_current_width": self.current_width}


@dataclass(frozen=True)
class NvLink:
    """Published NVLink figures of one GPU model.

    Attributes:
        product: the product name, e.g. ``"H100 SXM"``.
        version: NVLink generation (4 on Hopper).
        links: NVLink links per GPU.
        bidirectional_gbps: total bandwidth per GPU over all links and both directions, GB/s (the
            datasheet's figure, e.g. 900).
        source: the datasheet or whitepaper the figures come from.
    """

    product: str
    version: int
    links: int
    bidirectional_gbps: float
    source: str

    @property
    def per_direction_gbps(self) -> float:
        """Half the bidirectional figure: what a one-way copy or an all-reduce's bus bandwidth compares with."""
        return self.bidirectional_gbps / 2


@dataclass(frozen=True)
class NvlinkRule:
    """One row of :data:`NVLINK_RULES`: the product token (a whole word of the name, so "h200" does not
    match "gh200"), tokens of which one must appear (the form factor), and the figures (None: the
    product has no NVLink of its own)."""

    model: str
    any_of: tuple[str, ...] = ()
    link: NvLink | None = None

    def matches(self, tokens: set[str]) -> bool:
        return self.model in tokens and (not self.any_of or any(t in tokens for t in self.any_of))


_HOPPER_WHITEPAPER = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): fourth-generation NVLink, 18 links"

# First matching row wins. PCIe and NVL cards (H100 PCIe, H100 NVL, H200 NVL, A100 PCIe, V100 PCIe, L4, ...)
# have no row or a None row: their NVLink is an optional bridge, so the card alone has no NVLink figure.
NVLINK_RULES: tuple[NvlinkRule, ...] = (
    NvlinkRule("h200", ("nvl", "pcie")),
    NvlinkRule("h200", link=NvLink("H200 SXM", 4, 18, 900.0, "NVIDIA H200 Tensor Core GPU datasheet (2024), "
               f"H200 SXM column: NVLink 900 GB/s; {_HOPPER_WHITEPAPER}")),
    NvlinkRule("h100", ("sxm", "sxm5", "hbm3"), NvLink("H100 SXM", 4, 18, 900.0, "NVIDIA H100 Tensor Core GPU "
               f"datasheet (2023), H100 SXM column: NVLink 900 GB/s; {_HOPPER_WHITEPAPER}")),
    NvlinkRule("a100", ("sxm", "sxm4"), NvLink("A100 SXM4", 3, 12, 600.0, "NVIDIA A100 Tensor Core GPU datasheet "
               "(2021), A100 SXM column: NVLink 600 GB/s; NVIDIA A100 Tensor Core GPU Architecture whitepaper "
               "(2020): third-generation NVLink, 12 links")),
    NvlinkRule("b200", link=NvLink("B200", 5, 18, 1800.0, "NVIDIA HGX B200 datasheet (2024): fifth-generation "
               "NVLink 1.8 TB/s per GPU; NVIDIA Blackwell Architecture Technical Brief (2024): 18 links")),
    NvlinkRule("v100", ("sxm2",), NvLink("V100 SXM2", 2, 6, 300.0, "NVIDIA V100 Tensor Core GPU datasheet (2020), "
               "V100 SXM2 column: NVLink 300 GB/s; NVIDIA Tesla V100 GPU Architecture whitepaper (2017): "
               "second-generation NVLink, 6 links")),
)


def nvlink_published(device_name: str) -> NvLink | None:
    """The published NVLink figures of a GPU by its full name (``torch.cuda.get_device_name``):
    ``"NVIDIA H100 80GB HBM3"`` -> H100 SXM, NVLink 4, 18 links, 900 GB/s bidirectional (450 per direction).
    None for PCIe and NVL cards (``"NVIDIA H100 PCIe"``: an NVLink bridge is optional), for names whose
    form factor cannot be told, and for GPUs not in :data:`NVLINK_RULES`.
    """
    tokens = name_tokens(device_name)
    rule = next((r for r in NVLINK_RULES if r.matches(tokens)), None)
    return rule.link if rule is not None else None


def _open_nvml(device: str) -> NvmlDevice | None:
    """NVML's handle of a CUDA device (found by PCI bus id or UUID, :class:`hwregress.hardware.nvml.NvmlDevice`),
    None off CUDA, without pynvml or a driver, or when no NVML device matches."""
    if device_kind(device) != "cuda":
        return None
    try:
        return NvmlDevice(device)
    except Exception:  # ImportError (no pynvml), NVMLError_LibraryNotFound (no driver), NvmlLookupError
        return None


def pcie_link(device: str) -> PcieLink | None:
    """The PCIe link of CUDA ``device`` (``"cuda:0"``) from NVML, max and current; None when ``device``
    is not CUDA, NVML is missing or has no device matching it, or NVML cannot read the max link."""
    nvml = _open_nvml(device)
    if nvml is None:
        return None
    try:
        n, h = nvml.nvml, nvml.handle
        max_generation = nvml.query("pcie_max_generation", lambda: n.nvmlDeviceGetMaxPcieLinkGeneration(h))
        max_width = nvml.query("pcie_max_width", lambda: n.nvmlDeviceGetMaxPcieLinkWidth(h))
        generation = nvml.query("pcie_generation", lambda: n.nvmlDeviceGetCurrPcieLinkGeneration(h))
        width = nvml.query("pcie_width", lambda: n.nvmlDeviceGetCurrPcieLinkWidth(h))
    finally:
        nvml.close()
    if max_generation is None or max_width is None:
        return None
    return PcieLink(int(max_generation), int(max_width), None if generation is None else int(generation),
                    None if width is None else int(width))


def active_nvlinks(device: str) -> int | None:
    """How many NVLink links of CUDA ``device`` are up: ``nvmlDeviceGetNvLinkState`` over links 0, 1, ...
    until NVML answers with an error (past the last link; NotSupported on a GPU without NVLink, hence 0).
    None when ``device`` is not CUDA or NVML is missing or has no device matching it."""
    nvml = _open_nvml(device)
    if nvml is None:
        return None
    try:
        return _count_active_links(nvml.nvml, nvml.handle)
    finally:
        nvml.close()


def _count_active_links(nvml: Any, handle: Any) -> int | None:
    state_of = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    if state_of is None:  # a pynvml too old to ask
        return None
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    active = 0
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            state = state_of(handle, link)
        except Exception:  # NVMLError_InvalidArgument past the last link, NVMLError_NotSupported
            break
        active += int(state == enabled)
    return active


def _pcie_roof(device: str) -> tuple[float, str] | None:
    link = pcie_link(device)
    gbps = link.published_gbps if link is not None else None
    if link is None or gbps is None:
        return None
    _, _, encoding, specification = PCIE_GENERATIONS[link.max_generation]
    return gbps, (f"{link.describe()}: {gbps:.1f} GB/s per direction after {encoding} encoding, TLP overhead "
                  f"not subtracted (PCI-SIG {specification}; NVML's max link of GPU and slot, the current link "
                  "downtrains at idle)")


def _nvlink_roof(nvlink: NvLink, active: int, allreduce: bool) -> tuple[float, str]:
    text = (f"{nvlink.product}: NVLink {nvlink.version}, {nvlink.links} links, {nvlink.bidirectional_gbps:g} GB/s "
            f"bidirectional per GPU, {nvlink.per_direction_gbps:g} GB/s per direction ({nvlink.source}); NVML: "
            f"{active} of {nvlink.links} links active")
    if allreduce:
        text += "; nccl-tests' busbw compares with the per-direction figure (nccl-tests doc/PERFORMANCE.md)"
    return nvlink.per_direction_gbps, text


def published_roof(name: str, device: str, device_name: str) -> tuple[float, str] | None:
    """The published GB/s (per direction) a measured interconnect ceiling sits beside, and its source text.

    ``h2d``/``d2h``: the PCIe figure of ``device``'s max link (:func:`pcie_link`). ``p2p``/``allreduce``:
    the NVLink per-direction figure of ``device_name`` (:func:`nvlink_published`) when NVML reports active
    links, else the PCIe figure (of ``device``'s link; the peer's and the route between them may be slower).
    None for ``gemm``/``copy`` (their roofs are :meth:`hwregress.hardware.roofline.Peak.roof`'s), off CUDA, without
    NVML, and for active NVLink with no published figure (a bridged PCIe card: the bridge's figure is not
    tabled, and the PCIe one would understate the link).

    Args:
        name: the ceiling, e.g. ``"p2p"``.
        device: the device spec, e.g. ``"cuda:0"``.
        device_name: its full name, e.g. ``"NVIDIA H100 80GB HBM3"``.

    Raises:
        ValueError: ``name`` is no ceiling.
    """
    if name in _DEVICE_CEILINGS:
        return None
    if name not in INTERCONNECT_CEILINGS:
        raise ValueError(f"unknown ceiling {name!r}; interconnect ceilings are {', '.join(INTERCONNECT_CEILINGS)}")
    if device_kind(device) != "cuda":
        return None
    if name in ("p2p", "allreduce"):
        active = active_nvlinks(device)
        if active:
            nvlink = nvlink_published(device_name)
            return _nvlink_roof(nvlink, active, name == "allreduce") if nvlink is not None else None
    return _pcie_roof(device)
