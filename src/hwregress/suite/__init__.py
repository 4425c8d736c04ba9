"""The hardware tests that ship with hwregress: training-step, inference, prefill and decode throughput, parity,
speedup, device ceilings, data-parallel scaling, co-located training and Spark inference, with the fixtures that
parametrize them (:mod:`hwregress.suite.fixtures`). Run them from any folder with the installed package::

    pip install 'hwregress[test]'
    pytest --pyargs hwregress.suite -m cpu

The plugin (:mod:`hwregress.plugin`) comes from hwregress's ``pytest11`` entry point; the repository's
``bench_tests/`` re-exports these modules so that ``pytest -m cpu`` there collects the same tests. This
``__init__`` imports nothing."""
