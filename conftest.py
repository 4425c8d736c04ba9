"""The hardware suite's root conftest: load the hwregress plugin and the fixtures that parametrize
bench_tests/. Nothing else lives here."""

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
