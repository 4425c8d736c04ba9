"""Interleaved A/B of two software stacks on one device in one session (issue 29): stack A is the running interpreter
and its environment, stack B another interpreter and/or other environment settings; one long-lived worker process per
stack runs the same model, their timed windows alternate in a seeded, balanced AB/BA order, each pair of windows gives
one throughput of each stack, and the verdict of B against A is judged on the pairs' log-ratios."""
