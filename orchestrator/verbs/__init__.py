"""The CLI's verbs beyond the sweep-file ones: one small module per verb, each exposing
``configure_parser(parser)`` and ``run(args) -> int`` (see ``orchestrator.cli.VERBS``)."""
