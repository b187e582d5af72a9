"""The pure model: matrix schema and grammar, the compatibility knowledge base, the plan, tags and the release policy.

No I/O beyond reading the matrix file, no docker, no HTTP (import contracts in pyproject.toml)."""
