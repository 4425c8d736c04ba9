"""hwregress: a pytest hardware regression suite for deep learning."""

from importlib.metadata import PackageNotFoundError, version


def _installed_version() -> str:
    """This distribution's version (``pyproject.toml`` is its one source); ``0+unknown`` in a checkout that was
    never installed (``PYTHONPATH=src``)."""
    try:
        return version("hwregress")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _installed_version()
