"""One module per CLI subcommand; each exposes ``add_parser(subparsers)`` and ``run(args)``."""
