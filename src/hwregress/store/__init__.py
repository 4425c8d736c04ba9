"""What is kept on disk and its vocabulary: atomic writes, the baselines files per hardware key, the session
results and their records, the verdicts, the history of sessions, the journal of a running session and the JSON
Schemas of the files. It imports neither torch nor pytest (a self-test checks the whole import graph, lazy imports
included), so that reading baselines or a history never loads torch; of hwregress it uses only ``store/`` and the
floor, :mod:`hwregress.summary` (the summary a history row carries). This ``__init__`` imports nothing."""
