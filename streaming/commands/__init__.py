"""CLI subcommands: each module defines ``register(subparsers)`` and is found automatically."""
