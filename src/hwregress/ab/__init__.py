"""Interleaved A/B of two software stacks on one device (issue 29): stack A is the running interpreter and its
environment, stack B another interpreter and/or other environment settings; one long-lived worker process per stack
runs the same model, and the orchestrator alternates their timed windows on the device."""
