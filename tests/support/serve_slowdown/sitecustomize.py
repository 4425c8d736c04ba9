"""A real slowdown of a served model, for the serving self-tests: Python imports this module at the start of every
process that has this folder on its path (the self-tests put it on the ``PYTHONPATH`` of the sessions whose server
must be slower, which the server inherits). With ``HWREGRESS_SELFTEST_SERVE_SLEEP_S`` set, every forward of
transformers' ``LlamaForCausalLM`` (one per prefill or decode step of the whole continuous batch) sleeps that long
first, so each output token of every request comes that much later, as a slower device or kernel would make it.
Without the variable, it does nothing."""

import importlib.abc
import importlib.util
import os
import sys
import time

SLEEP_S = float(os.environ.get("HWREGRESS_SELFTEST_SERVE_SLEEP_S") or 0)
TARGET = "transformers.models.llama.modeling_llama"


class _SlowLlama(importlib.abc.MetaPathFinder):
    """Finds the Llama module as usual, then wraps its causal LM's forward once the module has run."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # the real spec, found by the finders after this one
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            forward = module.LlamaForCausalLM.forward

            def slower(self, *args, **kwargs):
                time.sleep(SLEEP_S)
                return forward(self, *args, **kwargs)

            module.LlamaForCausalLM.forward = slower

        spec.loader.exec_module = exec_module
        return spec


if SLEEP_S > 0:
    sys.meta_path.insert(0, _SlowLlama())
