"""The served model of the serving self-tests: the Llama architecture small enough to answer quickly on 2 loaded
cores (2 layers, hidden 64, 512 words); shared by tests/serving/ and the pytester projects (selftest_support)."""

TINY_LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512,
              "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
