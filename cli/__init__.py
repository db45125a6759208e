"""The ``streamrec`` command line (:mod:`cli.main`), one module per subcommand in :mod:`cli.commands`."""
