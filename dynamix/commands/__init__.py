"""The ``dynamix`` commands, one module each: ``add_arguments(parser)`` and ``main(args) -> int``.

:data:`dynamix.cli.COMMANDS` maps a command name to its module (``dynamix evaluate`` ->
:mod:`dynamix.commands.evaluate`) and imports it only when that command runs. A command parses its
options, loads the config (:func:`dynamix.config.load`) and calls domain functions; the work itself
lives in the domain packages, so notebooks and tests call the same functions. Top layer: a command
may import anything, nothing imports a command.
"""
