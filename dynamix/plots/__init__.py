"""The figures: one function per figure, in a module per pipeline stage; each saves ``<stem>.png`` and
``<stem>.pdf`` and returns the Figure.

Inputs are the tidy tables the experiments write (``runs.csv`` curves, ``summary.csv`` aggregates),
so a figure can be redrawn from results without rerunning anything. Every axis names its unit;
intervals are the 95% t intervals over seeds from :func:`dynamix.evaluation.stats.aggregate` (bars),
or seaborn's bootstrap band over seeds on a common time grid (curves).

Legends sit outside the data (right of the panels, beneath a single wide panel, or in a grid's empty
cell), so no curve or bar hides behind one; a run that never reaches the target accuracy is marked
(an ``x`` at its budget, "not reached"; in the time-to-target figure a hatched bar to the run's
length, "n/n missed") rather than left out; lines differ in style and marker as well as colour, and
policies whose runs are identical are named together in the legend. Bootstrap bands use a fixed
seed and PDFs carry no creation date, so redrawing from the same tables gives the same files.

PNG is what DVC's plots and the README show (DVC's HTML renderer needs a CDN; PNGs do not); PDF is
for papers.

Modules:

- ``style``     the theme, :func:`~dynamix.plots.style.save` (PNG + PDF) and the legends every figure uses;
- ``curves``    accuracy against time, seeds on one time grid (the baselines and inference figures);
- ``bars``      bars with intervals and unreached targets marked (inference, scalability, transfer,
                compression);
- one module per stage, named after it, with that stage's figures: ``prepare``, ``baselines``,
  ``policy_training``, ``inference``, ``scalability``, ``transfer``, ``claims``, ``ablation``,
  ``compression``.

A stage's figures import only its own module and what that module imports, and this ``__init__``
imports nothing, so ``dvc repro`` reruns only the stages whose figure code an edit touches (each
stage's ``deps`` in ``dvc.yaml`` are the files it imports, ``tools/dvcgen.py``). The stage modules
never import each other (an import-linter contract in ``pyproject.toml``).
"""
