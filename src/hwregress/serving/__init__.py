"""Serving under load: the seeded request trace a window replays, what each request's timestamps give (TTFT, TPOT,
ITL, E2EL) and a window's figures (percentiles, throughputs, goodput under SLOs), with vLLM's definitions."""
