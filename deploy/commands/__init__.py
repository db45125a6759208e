"""One module per `streamrec` subcommand (see deploy/cli.py)."""
