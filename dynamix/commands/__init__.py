"""The ``dynamix`` commands, one module each: ``add_arguments(parser)`` and ``main(args) -> int``.

:data:`dynamix.cli.COMMANDS` maps a command name to its module (``dynamix evaluate`` ->
:mod:`dynamix.commands.evaluate`) and imports it only when that command runs. A command parses its
options, loads the config (:func:`dynamix.config.load`) and calls domain functions; the work itself
lives in the domain packages, so notebooks and tests call the same functions. Top layer: a command
may import anything, nothing imports a command.

Modules, grouped in data-flow order (command ``make-mini`` is module ``make_mini``):

- shared:       ``options``, the options several commands share and the names a run's identity
                gives a cluster and a policy (not a command; no command imports :mod:`dynamix.cli`);
- data:         ``make_mini`` (build the embedded CIFAR-10 subset), ``prepare_data`` (decode the
                configured source into the tensor cache);
- training:     ``train`` (single process, static batch), ``calibrate`` (the compute model
                t(b) = a_m + c_m b on this machine);
- simulator:    ``simulate`` (one virtual-time run), ``validate_sim`` (its iteration times against
                the engine), ``fit_surrogate`` and ``validate_surrogate`` (the fitted surrogate and
                its check against the real-math simulator);
- engine:       ``arbitrator`` (serve batch-size decisions over gRPC), ``launch`` (the workers,
                through torchrun);
- agent:        ``sample_clusters`` (validation clusters from the training distribution),
                ``train_policy`` (train the agent), ``select_policy`` (the seed that ships, chosen on
                validation clusters), ``convert_policy`` (a trusted pickled artifact
                rewritten as data only);
- evaluation:   ``evaluate`` (policies on clusters over seeds), ``sim2real`` (the real engine beside
                the simulator);
- experiments:  ``run`` (one experiment, as its notebook runs it), ``pipeline`` (every notebook of a
                profile into its own results root).
"""
