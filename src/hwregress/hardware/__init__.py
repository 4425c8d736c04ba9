"""The machine: what a device is and how it is doing. Devices (discovery, hardware key, environment fingerprint,
synchronize), the hardware identity that tells machines apart, the NVML bindings, the telemetry sampler, the
health probes, interconnect facts and the published roofline peaks. It may import torch, psutil and NVML, and
nothing of hwregress outside ``hardware/``; its torch-free modules (``facts``, ``roofline``, ``health``) are the
only ones ``judge/`` may use. This ``__init__`` imports nothing, so that reading a torch-free module never loads
torch."""
