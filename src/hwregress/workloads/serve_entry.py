"""``python -m hwregress.workloads.serve_entry serve FOLDER [OPTIONS]``: ``transformers serve`` with torchvision's
compiled-ops shim applied first (:func:`hwregress.workloads.registry.import_torchvision`).

transformers imports torchvision as it loads its models, and where torchvision's wheel is a CUDA build beside a CPU
build of torch (PyPI's torchvision for torch 2.13 on the CPU) that import fails with ``operator torchvision::nms
does not exist``; the served model's server then dies before it answers (seen on a fresh CI machine). This entry
point is the server process :func:`hwregress.serving.server.server_command` starts for the ``transformers`` engine:
the shim where it is needed, then transformers' own command line with the same arguments.
"""

from __future__ import annotations

import sys

from hwregress.workloads.registry import import_torchvision


def main(argv: list[str] | None = None) -> None:
    """Run ``transformers`` with ``argv`` (default: this process's arguments) after the torchvision shim."""
    import_torchvision()
    from transformers.cli.transformers import main as transformers_main

    sys.argv = ["transformers", *(sys.argv[1:] if argv is None else argv)]
    transformers_main()


if __name__ == "__main__":
    main()
