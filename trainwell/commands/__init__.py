"""The ``trainwell`` verbs: one module per verb (or per small group of verbs).

Each module has ``register(sub)``, which adds its sub-parsers to the ``trainwell`` parser
and sets ``handler=`` on each: a function that takes the parsed arguments and returns
the exit code. :data:`trainwell.cli.COMMANDS` lists the modules, in the order of
``trainwell --help``; ``cli.main`` parses the line, applies ``--safe`` and calls the
handler through :func:`trainwell.commands.common.run`, which turns a
:class:`~trainwell.errors.UserError` into one line and exit code 2.

How to add a verb:

1. A module here, ``trainwell/commands/mine.py``, with ``register(sub)``::

       from trainwell.commands.common import (
           Subparsers, add_config, add_debug, add_overrides, load_config,
       )

       def register(sub: Subparsers) -> None:
           \"\"\"Add the ``mine`` verb.\"\"\"
           verb = sub.add_parser("mine", help="one line for trainwell --help",
                                 description="what it does, for trainwell mine --help")
           add_config(verb)        # only if it reads a config: --config FILE
           verb.add_argument("--out", metavar="DIR", help="...")  # where output goes: --out
           add_debug(verb)         # every verb takes --debug after its name
           add_overrides(verb)     # with add_config: KEY=VALUE ...
           verb.set_defaults(handler=_mine)

       def _mine(args) -> int:
           from trainwell.engine.fit import fit  # heavy imports here, never at the top

           cfg = load_config(args)  # a bad key or value: one line, exit 2
           ...
           return 0

   A verb that starts several processes adds :func:`~trainwell.commands.common.add_launcher`
   and reads it with :func:`~trainwell.commands.common.launch_options`, as ``train`` does.
   A verb with ``--config`` gets ``--safe`` by itself (:func:`trainwell.trust.add_safe_flags`).
2. Its module name in ``COMMANDS`` in ``trainwell/cli.py``.
3. Bad input raises :class:`~trainwell.errors.UserError` with a one-line message, checked
   before any slow work where it can be; a failed check that is not bad input returns 1.
4. Tests: ``tests/unit/cli/test_cli_verbs.py`` finds the module by itself and checks that it is
   registered, that ``trainwell mine --help`` works and that it imports no torch;
   ``tests/e2e/test_startup.py`` counts the modules every ``--help`` imports. Add the verb's
   own tests, with its one-line errors, beside the others (``tests/unit/cli/test_cli.py``).
"""
