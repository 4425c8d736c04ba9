"""Which change made it slower: a noise-aware bisection over ordered candidates (commits, interpreters, environment
settings), each step an interleaved A/B judged at planned looks (docs/bisect.md)."""
