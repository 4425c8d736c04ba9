"""The suite's conftest, read when pytest collects the installed package (``pytest --pyargs hwregress.suite``):
the fixtures that parametrize its tests. The plugin is named too for a run from a checkout that is not installed
(``PYTHONPATH=src``); where hwregress is installed its ``pytest11`` entry point, registered under the same name,
has loaded it already and this entry is skipped."""

from hwregress.suite.fixtures import FIXTURE_MODULES

pytest_plugins = ["hwregress.plugin", *FIXTURE_MODULES]
