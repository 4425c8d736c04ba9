"""The hardware suite's root conftest: load the hwregress plugin and the fixtures that parametrize
bench_tests/ (both ship in the package: :mod:`hwregress.plugin`, :mod:`hwregress.suite.fixtures`). Nothing else
lives here. Where hwregress is installed, its ``pytest11`` entry point has registered the plugin under this very
name, and pytest skips the entry below instead of registering it twice."""

pytest_plugins = [
    "hwregress.plugin",
    "fixtures.devices",
    "fixtures.models",
    "fixtures.batch_sizes",
    "fixtures.modes",
    "fixtures.contexts",
    "fixtures.compilation",
    "fixtures.dtypes",
    "fixtures.data",
    "fixtures.distributed",
]
