"""Interleaved A/B of two software stacks on one device in one session (issue 29): one long-lived worker process per
stack, their timed windows alternating in a seeded, balanced AB/BA order, each pair of windows giving one throughput
of stack A (the running interpreter) and one of stack B (another interpreter or other environment settings), and the
verdict of B against A judged on the pairs' log-ratios."""
