"""The playground's controls (ipywidgets): pick or type a cluster, pick policies and a workload, run
them with a progress bar and watch the views fill in; or open a finished run in the same views.

    ui = Playground(cluster="clusters/heldout/hetero-speed-4.yaml", policies=["static:64", "lbbsp"])
    ui              # the controls (a cell's value)
    ui.run()        # run the current settings, views in this cell's output (what papermill keeps)
    ui.open("results/inference")

The Run and Open buttons do the same into the widget's own output area. Headless (papermill), the
widgets only display; the notebook's parameters set their values and the calls above drive the run.
A mistake in the controls (bad YAML, an unknown policy, an out-of-range field: a
:class:`~dynamix.errors.UserError`) shows one line naming the field; anything else is a bug and shows
its traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import ipywidgets as w
from IPython.display import HTML, Image, Markdown, clear_output, display

from dynamix import paths
from dynamix.config import ConfigError
from dynamix.errors import UserError
from dynamix.explore import results, session, views
from dynamix.explore.results import RunSet

TYPED_IN = "(typed in below)"
WIDE = w.Layout(width="98%")


def _error(exc: BaseException) -> HTML:
    return HTML(f"<pre style='color:#b00020;white-space:pre-wrap'>{type(exc).__name__}: {exc}</pre>")


class Live:
    """Shows a :class:`RunSet`'s views and table, replaced as runs finish.

    With ``into`` None they go to the running cell's output through display handles (updated in
    place, and kept by papermill); otherwise into that Output widget, cleared and redrawn.
    """

    def __init__(self, into: w.Output | None = None) -> None:
        self.into = into
        self.handles: list[Any] = []

    def __call__(self, rs: RunSet) -> None:
        items = [views.accuracy_vs_time(rs), views.batch_sizes(rs), views.time_split(rs), views.table(rs)]
        if self.into is None:
            if not self.handles:
                self.handles = [display(x, display_id=True) for x in items]
            else:
                for handle, x in zip(self.handles, items):
                    handle.update(x)
            return
        with self.into:
            clear_output(wait=True)
            for x in items:
                display(x)


class Playground:
    """The controls, initialised from the notebook's parameters (see the module docstring)."""

    def __init__(self, cluster: str = "clusters/heldout/hetero-speed-4.yaml",
                 policies: Sequence[str] = ("static:64", "lbbsp"), profile: str = "smoke", workload: str = "",
                 epochs: float = 0.0, seeds: int = 1, open_run: str = "", out_dir: str = "") -> None:
        self.out_dir = out_dir
        if profile not in session.profiles():
            raise ConfigError(f"profile = {profile!r} is not defined: must be one of {', '.join(session.profiles())}")
        examples = session.example_clusters()
        choice, text = TYPED_IN, str(cluster)
        if str(cluster).strip() and "\n" not in str(cluster) and paths.resolve(str(cluster)).is_file():
            choice = str(cluster)
            text = paths.resolve(choice).read_text()
            if choice not in examples:
                examples = [choice] + examples
        # cluster
        self.cluster_choice = w.Dropdown(options=[TYPED_IN] + examples, value=choice, description="cluster",
                                         layout=w.Layout(width="60%"))
        self.draw_button = w.Button(description="Draw", tooltip="draw the cluster typed below")
        self.cluster_yaml = w.Textarea(value=text, rows=10, layout=WIDE,
                                       placeholder="name: my-cluster\nworkers:\n  - {count: 4, device: reference}")
        self.cluster_out = w.Output()
        # policies and workload
        offered = list(session.SUGGESTED_POLICIES) + session.trained_policies()
        self.policies = w.TagsInput(value=list(policies), allow_duplicates=False, layout=WIDE)
        self.policy_add = w.Combobox(options=offered, placeholder="add a policy spec: static:128, lbbsp:batch=512, "
                                     "dynamix:NAME ...", ensure_option=False, layout=w.Layout(width="60%"))
        self.add_button = w.Button(description="Add")
        self.profile = w.Dropdown(options=session.profiles(), value=profile, description="profile")
        self.workload = w.Combobox(options=list(session.SUGGESTED_WORKLOADS), value=workload,
                                   placeholder="profile's workload", description="workload", ensure_option=False)
        self.epochs = w.BoundedFloatText(value=epochs, min=0.0, max=100.0, step=0.1, description="epochs",
                                         tooltip="epochs per run (0: the profile's experiments.epochs)")
        self.seeds = w.BoundedIntText(value=seeds, min=1, max=session.MAX_SEEDS, description="seeds")
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.status = w.HTML()
        self.progress_out = w.Output()
        self.views_out = w.Output()
        # finished runs
        self.run_choice = w.Dropdown(description="run", layout=w.Layout(width="60%"))
        self.refresh_button = w.Button(description="Refresh", tooltip="look for run folders again")
        self.group = w.Dropdown(description="group", layout=w.Layout(width="60%"))
        self.open_button = w.Button(description="Open", button_style="primary", icon="folder-open")
        self.open_out = w.Output()
        self._loaded: dict[str, RunSet] = {}
        self._refresh(open_run)

        self.cluster_choice.observe(self._on_choice, names="value")
        self.draw_button.on_click(lambda _: self.draw())
        self.add_button.on_click(self._on_add)
        self.run_button.on_click(self._on_run)
        self.refresh_button.on_click(lambda _: self._refresh(self.run_choice.value))
        self.run_choice.observe(lambda _: self._on_run_choice(), names="value")
        self.open_button.on_click(self._on_open)

        run_box = w.VBox([
            w.HTML("<b>Cluster</b>: pick an example or edit the YAML (workers, speeds, links, events)"),
            w.HBox([self.cluster_choice, self.draw_button]), self.cluster_yaml, self.cluster_out,
            w.HTML("<b>Policies</b>: static:B, lbbsp, gns, ramp, lbbsp:batch=512, dynamix:NAME (results/policies)"),
            self.policies, w.HBox([self.policy_add, self.add_button]),
            w.HTML("<b>Workload</b>: params.yaml profile, MODEL[@WIDTH]/OPT, epochs per run, seeds"),
            w.HBox([self.profile, self.workload]), w.HBox([self.epochs, self.seeds]),
            w.HBox([self.run_button, self.status]), self.progress_out, self.views_out,
        ])
        open_box = w.VBox([
            w.HTML("<b>A finished run</b>: results/&lt;stage&gt;, results/eval/..., a playground run, or "
                   "docs/expected (figures only)"),
            w.HBox([self.run_choice, self.refresh_button]), w.HBox([self.group, self.open_button]), self.open_out,
        ])
        self.widget = w.Tab(children=[run_box, open_box], titles=("Run policies", "Open a finished run"))
        self.draw()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # -------------------------------------------------------------------------------- settings
    def spec(self):
        """The cluster typed in the text area (a picked example fills it)."""
        return session.load_cluster(self.cluster_yaml.value)

    def config(self):
        return session.workload_config(self.profile.value, self.workload.value, float(self.epochs.value))

    def out_path(self, spec) -> Path:
        return paths.resolve(self.out_dir) if self.out_dir else session.default_out_dir(spec)

    # -------------------------------------------------------------------------------- actions
    def draw(self) -> None:
        """Draw the cluster into the controls (an error line when the YAML is wrong)."""
        with self.cluster_out:
            clear_output(wait=True)
            try:
                display(views.cluster(self.spec()))
            except UserError as exc:  # one line; anything else is a bug and shows its traceback
                display(_error(exc))

    def run(self, into: w.Output | None = None) -> RunSet:
        """Run the chosen policies on the cluster with the current settings; the views are drawn after
        every finished run (``into``: an Output widget, default this cell) and saved to ``OUT/figures``."""
        spec, cfg = self.spec(), self.config()
        out = self.out_path(spec)
        live = Live(into)
        rs = session.run(spec, list(self.policies.value), cfg, int(self.seeds.value), out, on_update=live)
        views.save_all(rs, out / "figures")
        return rs

    def open(self, folder: str | Path, group: dict | None = None, into: w.Output | None = None) -> RunSet | None:
        """Show a finished run folder in the same views (``docs/expected``: its figures). Returns its
        :class:`RunSet` (one group, default the first), or None for a folder of figures."""
        if not str(folder).strip():
            self._show([Markdown("No finished run chosen: set `open_run` (e.g. `results/inference`) or use the "
                                 "*Open a finished run* tab.")], into)
            return None
        path = paths.resolve(folder)
        if not (path / "runs.csv").exists() and results.figures_in(path):
            self._show([x for png in results.figures_in(path) for x in (Markdown(f"`{png.name}`"), Image(png))], into)
            return None
        rs = self._load(path).select(group)
        self._show([*views.figures(rs).values(), views.table(rs)], into)
        return rs

    @staticmethod
    def _show(items: list, into: w.Output | None) -> None:
        if into is None:
            for x in items:
                display(x)
            return
        with into:
            clear_output(wait=True)
            for x in items:
                display(x)

    def _load(self, path: Path) -> RunSet:
        key = str(path)
        if key not in self._loaded:
            self._loaded[key] = results.load(path)
        return self._loaded[key]

    # -------------------------------------------------------------------------------- callbacks
    def _on_choice(self, change) -> None:
        if change["new"] != TYPED_IN:
            self.cluster_yaml.value = paths.resolve(change["new"]).read_text()
            self.draw()

    def _on_add(self, _) -> None:
        spec = self.policy_add.value.strip()
        if spec and spec not in self.policies.value:
            self.policies.value = [*self.policies.value, spec]
        self.policy_add.value = ""

    def _on_run(self, _) -> None:
        self.run_button.disabled = True
        self.status.value = "running..."
        self.views_out.clear_output()
        with self.progress_out:
            clear_output(wait=True)
            try:
                rs = self.run(into=self.views_out)
                self.status.value = f"done: {len(rs.summary)} runs, written to <code>{rs.source}</code>"
                self._refresh(self.run_choice.value)
            except UserError as exc:  # one line; anything else is a bug and shows its traceback
                self.status.value = "stopped"
                display(_error(exc))
            finally:
                self.run_button.disabled = False

    def _refresh(self, keep: str = "") -> None:
        found = [str(p.relative_to(paths.ROOT)) if p.is_relative_to(paths.ROOT) else str(p)
                 for p in results.available()]
        if results.figures_in(results.EXPECTED):
            found.append(str(results.EXPECTED.relative_to(paths.ROOT)))
        if keep and keep not in found:
            found.insert(0, keep)
        self._loaded.clear()
        self.run_choice.options = found
        self.run_choice.value = keep if keep in found else (found[0] if found else None)
        self._on_run_choice()

    def _on_run_choice(self) -> None:
        folder = self.run_choice.value
        self._groups: list[dict] = []
        if folder and (paths.resolve(folder) / "runs.csv").exists():
            try:
                self._groups = self._load(paths.resolve(folder)).groups()
            except UserError as exc:
                with self.open_out:
                    clear_output()
                    display(_error(exc))
        labels = [", ".join(f"{k} {v}" for k, v in g.items()) or "all runs" for g in self._groups]
        self.group.options = [(label, i) for i, label in enumerate(labels)]
        self.group.disabled = not labels

    def _on_open(self, _) -> None:
        group = self._groups[self.group.value] if self._groups and self.group.value is not None else None
        try:
            self.open(self.run_choice.value or "", group, into=self.open_out)
        except UserError as exc:  # one line; anything else is a bug and shows its traceback
            self._show([_error(exc)], self.open_out)
