"""Jobs of several processes: data-parallel scaling, all-reduce bandwidth and co-located training, launched with
torch.distributed's elastic launcher (the engine of ``torchrun``) and watched from the pytest process.

``topology`` says where ranks run, ``job`` what they run, ``launch`` starts and watches a job (``driver`` is the
process that hosts the launcher's agent), ``worker`` is every rank's entry point, and ``ddp_window``,
``collectives`` and ``colocation`` are what a rank measures.
"""
