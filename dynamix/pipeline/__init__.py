"""The pipeline around the stages: their notebooks, the order they run in, and the record each leaves.

The stages themselves (:mod:`dynamix.experiments`) compute; this package says which notebook runs
which stage, runs those notebooks in order for a profile outside DVC, takes the one step between two
stages that is no stage (the choice among the trained seeds), and publishes what they wrote.

Modules, in the order a result meets them:

- ``manifest``   ``manifest.json``: config, hash, git sha (clean or ``-dirty`` for the paths a stage
                 reads), versions and command of a stage's results; whether they may be published;
- ``notebooks``  write ``notebooks/NN_<stage>.ipynb`` from one template (``python -m
                 dynamix.pipeline.notebooks``);
- ``runner``     every stage's notebook in order for a profile into its results root, resumable over
                 sittings, each stage's wall time in ``stage_times.csv`` (``dynamix pipeline``);
- ``stages``     what each stage reads besides its code: its ``params.yaml`` keys and files (``dvc.yaml``
                 is written from it and the import graph: ``tools/dvcgen.py``);
- ``selection``  between policy_training and inference, when asked: which trained seed's policy ships,
                 scored on the validation clusters (``dynamix select-policy``);
- ``publish``    a finished pipeline's headline files and figures to ``docs/expected/<profile>/``
                 (``dynamix pipeline --publish``), refused unless they come from this commit.

Layer: just below :mod:`dynamix.experiments`. The runner executes the stages' notebooks, each in a
kernel of its own (papermill), and imports no stage; the stages and the selection import
:mod:`.manifest` to write their record. ``dvc repro`` runs the same notebooks for the default profile.
"""
