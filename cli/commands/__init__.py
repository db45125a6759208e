"""One module per `streamrec` subcommand (see cli/main.py)."""
