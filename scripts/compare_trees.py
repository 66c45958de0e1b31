"""Prove that a refactor left fedpipe's results bitwise identical.

Runs the same set of small experiments ("variants") once with each of two source
trees, "before" and "after", each run in a fresh project directory, and compares
every file the two runs wrote, bit for bit::

    python scripts/compare_trees.py --before /path/to/old --after /path/to/new
    python scripts/compare_trees.py --before A --after B --only krum 'dp-*'
    python scripts/compare_trees.py --before A --after B --keep /tmp/kept
    python scripts/compare_trees.py --list

Exit status: 0 every variant's outputs are identical; 1 a file differs or a run
failed (the table says which, with the tail of the failed run's output); 2 bad
usage (a tree that is not a fedpipe source tree, an unknown ``--only`` name) or no
Prefect server could be started.

How a variant runs
------------------
With ``sys.executable -m <cli> ...``, the environment's ``PYTHONPATH`` set to the
tree (it takes precedence over an editable install of fedpipe; a module a tree
lacks would still come from that install) and the project directory as working
directory. ``<cli>`` is ``fedpipe_app.cli`` when the tree has
``fedpipe_app/cli.py``, else ``fedpipe.cli``.

* A *fresh* variant: ``<cli> init project`` (git, DVC, the tree's own
  ``dvc.yaml`` and ``params.yaml`` templates), its data copied in (``table``,
  ``images``), ``params.yaml`` rewritten as the template's settings with the
  variant's laid on top (``TINY`` first for the tiny ones), then ``<cli> run
  --no-server-start --no-report -v``. ``run`` regenerates ``round_chain``.
* A *dependent* variant starts from a copy of its base variant's finished project
  in the same tree (as the project's own end-to-end tests do), with ``models/``,
  ``metrics/``, ``reports/summary.md`` and the logs deleted, so that every file
  there is written by the variant's own run; its settings are laid over the
  base's and ``run`` brings the stages up to date: the data stages stay cached,
  ``partition`` runs again when its params changed, ``init``, every round and
  ``summary`` always run.

A variant's settings are written in the sweep's ``-S`` syntax and laid on as
``-S`` lays them (:func:`fedpipe.config.overrides.parse_overrides` and
``with_overrides``, from the fedpipe this script runs with, not from either
tree). The tiny settings (``TINY``) and the seeded data (``write_table``,
``write_image_folder``) come from ``scripts/tiny_data.py`` beside this script;
the data is generated once and copied into both trees' projects, so both runs
get the same bytes whatever either tree does with that file.

Both trees' runs report to one ``prefect server start`` (a free loopback port, a
temporary ``PREFECT_HOME``, analytics off, ``--no-services --no-ui``), stopped at
the end whatever happens. Every run gets ``DVC_NO_ANALYTICS=1``, its own
``PREFECT_HOME``, a temporary DVC site cache and remote (nothing under ``~``),
``FEDPIPE_WARM=0`` (no warm stage worker outlives a run). At most ``--jobs``
(default 2) runs go at once; a variant's two runs go side by side.

What is compared
----------------
Every file in the project directory after the run, byte for byte (a file only
one run wrote is a difference): ``models/`` (weights, server state, client
state), ``metrics/`` (rounds, clients, health, history, summary), ``data/``
(raw, prepared, partition manifest), ``reports/`` (summary, partition report,
validation summary), and also the ``params.yaml`` the tree's ``run`` synced and
the ``dvc.yaml`` its ``init`` wrote; a new output folder a tree writes is
compared too. Except these, which legitimately carry times, run ids or paths,
or are not results:

* ``.git/``: git's own repository (``fedpipe init`` makes one; nothing is
  committed).
* ``.dvc/``: DVC's internals: ``tmp/`` (locks, state database, ``btime``),
  ``config`` (the remote's path) and ``cache/`` (content-addressed copies of the
  outputs compared here, and what ``dvc.lock`` records).
* ``logs/``: the run's log, named after and filled with wall-clock times.
* ``reports/validation/data_docs/``: Great Expectations' HTML data docs, in
  folders named after the validation's run time, with the time in the pages.
* ``reports/validation/result.json``: Great Expectations' full validation
  result, which holds the run time and run ids. The validation's verdict,
  ``reports/validation/summary.json``, *is* compared.
* ``reports/report.html``: not written (``--no-report``); it holds the time it
  was made, the project's folder name and the hash of ``reports/validation``.
  The doctor and the HTML report read the compared files and write nothing
  else.
* The inputs this script copies into the projects (``data/table.csv``,
  ``data/images/``): the same bytes by construction.

``dvc.lock`` itself holds the hash of ``reports/validation`` (which covers the
data docs), so it is compared as a record: the md5 of every out of every stage
must be equal and the stages and outs the same, except the out
``reports/validation`` (for the reason above). Its ``deps`` and ``params``
sections are not compared (they are the inputs: outs of earlier stages, compared
as outs, and the settings this script wrote).

Timings. A JSON file whose bytes differ is parsed, and the keys named
``seconds`` or ending in ``_seconds`` (wall-clock durations, e.g. the time a
health record took) are removed at every depth; if the rest is equal the file
counts as identical and the report says so ("equal apart from timings"), and so
does a ``dvc.lock`` out whose only differing files are such files. At b3bcadc no
output file holds such a key (the health record's ``seconds`` is taken out
before it is written); the rule covers a tree that writes one. Nothing else is
forgiven: arrays equal in value but stored differently, or the same JSON values
formatted differently, are differences (the detail says so).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from tiny_data import TINY, merge, write_image_folder, write_table  # noqa: E402

from fedpipe.config.overrides import parse_overrides, with_overrides  # noqa: E402
from orchestration.server import is_healthy  # noqa: E402

EXIT_SAME, EXIT_DIFFERENT, EXIT_USAGE = 0, 1, 2
TREES = ("before", "after")
CLI_MODULES = (
    ("fedpipe_app/cli.py", "fedpipe_app.cli"),
    ("fedpipe/cli.py", "fedpipe.cli"),
)
RUN_TIMEOUT_S = 600.0  # one command (init or run) of one variant
SERVER_TIMEOUT_S = 300.0  # a fresh server on a busy 2-core machine took over 120 s
TAIL_LINES = 25  # lines of a failed run's output in the report
DETAILS = 12  # differences described per variant in the report

# --------------------------------------------------------------- what is compared

#: Excluded from the comparison (see the module's docstring for why): folders
#: (a trailing slash) and files, relative to the project.
EXCLUDED = (
    ".git/",
    ".dvc/",
    "logs/",
    "reports/validation/data_docs/",
    "reports/validation/result.json",
    "reports/report.html",
)
#: dvc.lock outs not compared: their hash covers excluded files.
EXCLUDED_LOCK_OUTS = ("reports/validation",)
#: JSON keys holding wall-clock durations, removed before a second comparison.
TIMING_KEY = "seconds"
#: Folders a dependent variant deletes from its base's copy before its run.
RUN_OUTPUTS = ("models", "metrics", "reports/summary.md", "logs")

ROUNDS = 3  # every variant's federation.rounds


# ----------------------------------------------------------------------- variants


@dataclass(frozen=True)
class Variant:
    """One experiment, run once with each tree.

    Attributes
    ----------
    name : str
        What ``--only`` and the table call it.
    group : str
        What it exercises, for ``--list``.
    settings : str
        Settings laid over the starting params, in the sweep's ``-S`` syntax
        (``dotted.key=value``, YAML values, separated by spaces).
    base : str or None
        A dependent variant starts from this variant's finished project (same
        tree); None: a fresh project.
    data : str
        Fresh variants: ``mnist5k`` (the data that ships with fedpipe),
        ``table`` or ``images`` (``scripts/tiny_data.py``'s seeded data).
    tiny : bool
        Fresh variants: start from :data:`TINY` (else the template's defaults).
    """

    name: str
    group: str
    settings: str = ""
    base: str | None = "fedavg"
    data: str = "mnist5k"
    tiny: bool = True

    def overrides(self) -> dict[str, Any]:
        """``settings`` as dotted key -> value (the sweep's own parser)."""
        return parse_overrides(self.settings.split())


def _fed(clients: int, fraction_fit: float = 1.0, min_clients: int = 1) -> str:
    return (
        f"federation.clients={clients} federation.fraction_fit={fraction_fit} "
        f"federation.min_clients={min_clients} "
    )


OWN_DATA = "partition.min_samples=10 validation.min_rows=50"

VARIANTS: tuple[Variant, ...] = (
    # ---- fresh projects (the bases)
    Variant("fedavg", "strategies (tiny: 3 clients, 2 a round, mlp)", base=None),
    Variant(
        "default",
        "default params (small_cnn, 10 clients) on the built-in MNIST",
        base=None,
        tiny=False,
    ),
    Variant(
        "images",
        "own data: an image folder, seed_cnn",
        "data.source=images data.path=data/images data.image_size=[32,32] "
        f"model.name=seed_cnn {_fed(2)} {OWN_DATA}",
        base=None,
        data="images",
    ),
    Variant(
        "table-natural",
        "own data: a CSV table, partition natural (client column)",
        "data.source=table data.path=data/table.csv data.client_column=hospital "
        f"{_fed(3)} partition.method=natural {OWN_DATA}",
        base=None,
        data="table",
    ),
    # ---- strategies (personalization methods ride along, as in the e2e tests)
    Variant(
        "fedprox-fedper",
        "strategies + personalization fedper",
        "strategy.name=fedprox strategy.proximal_mu=0.01 "
        "personalization.method=fedper personalization.last_k=1",
    ),
    Variant(
        "fedavgm", "strategies", "strategy.name=fedavgm strategy.server_momentum=0.9"
    ),
    Variant(
        "fedadam-ditto",
        "strategies + personalization ditto",
        "strategy.name=fedadam personalization.method=ditto "
        "personalization.ditto_lambda=0.1",
    ),
    Variant("fedyogi", "strategies", "strategy.name=fedyogi"),
    Variant("fedadagrad", "strategies", "strategy.name=fedadagrad"),
    Variant(
        "fedmedian-finetune",
        "strategies + personalization finetune",
        "strategy.name=fedmedian personalization.method=finetune "
        "personalization.finetune_epochs=1",
    ),
    Variant(
        "fedtrimmedavg",
        "strategies (5 clients)",
        f"{_fed(5)} strategy.name=fedtrimmedavg strategy.beta=0.2",
    ),
    Variant(
        "krum",
        "strategies (5 clients)",
        f"{_fed(5)} strategy.name=krum strategy.num_byzantine=1",
    ),
    Variant(
        "multikrum",
        "strategies (5 clients)",
        f"{_fed(5)} strategy.name=multikrum strategy.num_byzantine=1 "
        "strategy.num_selected=3",
    ),
    Variant(
        "bulyan",
        "strategies (7 clients: n >= 4f + 3)",
        f"{_fed(7)} strategy.name=bulyan strategy.num_byzantine=1",
    ),
    Variant("clipping", "strategies (adaptive: median norm)", "strategy.name=clipping"),
    Variant("scaffold", "strategies", "strategy.name=scaffold"),
    # ---- clients
    Variant(
        "client-fedprox-adam",
        "client algorithm fedprox with client.options under fedavg; optimizer "
        "adam, 2 epochs capped at 20 local steps, batch 16",
        "client.algorithm=fedprox client.options.proximal_mu=0.1 "
        "train.optimizer=adam train.lr=0.005 train.epochs=2 train.local_steps=20 "
        "train.batch_size=16",
    ),
    Variant(
        "fedbn-cnn",
        "personalization fedbn on a batch-norm cnn",
        "model.name=cnn model.depth=2 model.width=8 model.kernel_size=3 "
        "model.batch_norm=true personalization.method=fedbn",
    ),
    # ---- privacy
    Variant(
        "dp-central",
        "privacy central, fixed clip",
        "privacy.mechanism=central privacy.clip_norm=1.0 privacy.noise_multiplier=0.3",
    ),
    Variant(
        "dp-central-adaptive",
        "privacy central, adaptive clip",
        "privacy.mechanism=central privacy.noise_multiplier=0.5 "
        "privacy.adaptive_clip=true privacy.count_noise_multiplier=1.0",
    ),
    Variant(
        "dp-local",
        "privacy local",
        "privacy.mechanism=local privacy.clip_norm=1.0 privacy.noise_multiplier=0.1",
    ),
    Variant(
        "dpsgd-fedprox",
        "privacy dpsgd (noise from the seed: params_not_private) with client "
        "fedprox: DP-SGD's step with the proximal term",
        "privacy.mechanism=dpsgd privacy.clip_norm=1.0 privacy.noise_multiplier=1.1 "
        "privacy.noise_key=params_not_private client.algorithm=fedprox "
        "client.options.proximal_mu=0.1",
    ),
    # ---- attacks
    Variant(
        "sign-flip-fedmedian",
        "attack sign_flip (client 2) against fedmedian",
        f"{_fed(5)} strategy.name=fedmedian attack.name=sign_flip attack.clients=[2]",
    ),
    Variant(
        "label-flip-krum",
        "attack label_flip_all (share 0.2) against krum",
        f"{_fed(5)} strategy.name=krum strategy.num_byzantine=1 "
        "attack.name=label_flip_all attack.share=0.2",
    ),
    Variant(
        "scaling-clipping",
        "attack scaling (client 0) against fixed norm clipping",
        f"{_fed(5)} strategy.name=clipping strategy.clip_norm=0.5 "
        "attack.name=scaling attack.clients=[0] attack.from_round=2",
    ),
    # ---- faults and failures
    Variant(
        "failing-nonfinite",
        "faults.failing_clients [0], nonfinite_clients [1] from round 2",
        f"{_fed(4, min_clients=2)} faults.failing_clients=[0] "
        "faults.nonfinite_clients=[1] faults.from_round=2",
    ),
    Variant(
        "dropout-partial",
        "federation.dropout, deadline 20 steps, slow clients, stragglers partial",
        f"{_fed(4)} federation.dropout=0.3 federation.round_deadline_steps=20 "
        "federation.stragglers=partial federation.slow_clients=0.5 "
        "federation.slow_speed=0.5",
    ),
    Variant(
        "stragglers-drop",
        "deadline 30 steps, a slow client, stragglers drop",
        f"{_fed(4)} federation.round_deadline_steps=30 federation.stragglers=drop "
        "federation.slow_clients=0.25 federation.slow_speed=0.5",
    ),
    # ---- evaluation and partitions
    Variant(
        "dirichlet-eval-sample",
        "partition dirichlet (alpha 0.5); evaluation.clients sample (2 a round, "
        "all every 2nd round and the last)",
        f"{_fed(5, fraction_fit=0.6)} partition.method=dirichlet partition.alpha=0.5 "
        "evaluation.clients=sample evaluation.sample_size=2 evaluation.full_every=2",
    ),
    Variant(
        "pathological",
        "partition pathological (2 classes a client)",
        f"{_fed(5)} partition.method=pathological partition.classes_per_client=2",
    ),
    Variant(
        "shards-cohort-3",
        "partition shards (2 a client); train.cohort_size 3 (vectorized clients: "
        "cohorts of 3 and 2)",
        f"{_fed(5)} partition.method=shards partition.shards_per_client=2 "
        "train.cohort_size=3",
    ),
    Variant(
        "quantity-weight-sum",
        "partition quantity (sigma 0.5); faults.aggregation_weight_sum 1.5",
        f"{_fed(4)} partition.method=quantity partition.quantity_sigma=0.5 "
        "faults.aggregation_weight_sum=1.5",
    ),
)


def select(patterns: Sequence[str] | None) -> list[Variant]:
    """The variants ``--only`` names (exact names or shell patterns), with the
    bases they start from, in :data:`VARIANTS` order; all without ``patterns``.

    Raises
    ------
    UsageError
        A pattern matches no variant.
    """
    by_name = {v.name: v for v in VARIANTS}
    if not patterns:
        return list(VARIANTS)
    wanted: set[str] = set()
    for pattern in patterns:
        hits = fnmatch.filter(by_name, pattern)
        if not hits:
            raise UsageError(
                f"--only {pattern}: no such variant; `--list` shows them: "
                + ", ".join(by_name)
            )
        wanted.update(hits)
    for name in list(wanted):
        base = by_name[name].base
        while base is not None:
            wanted.add(base)
            base = by_name[base].base
    return [v for v in VARIANTS if v.name in wanted]


# -------------------------------------------------------------------- errors, trees


class UsageError(Exception):
    """Bad command line or setup: one line, exit status 2."""


@dataclass(frozen=True)
class Tree:
    """A fedpipe source tree and the CLI module it runs with."""

    label: str
    path: Path
    cli: str


def resolve_tree(label: str, raw: str) -> Tree:
    """``--before`` / ``--after`` as a :class:`Tree`.

    Raises
    ------
    UsageError
        Not a directory, or neither ``fedpipe_app/cli.py`` nor ``fedpipe/cli.py``
        in it.
    """
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise UsageError(f"--{label} {raw}: not a directory")
    for rel, module in CLI_MODULES:
        if (path / rel).is_file():
            return Tree(label, path.resolve(), module)
    wanted = " or ".join(rel for rel, _ in CLI_MODULES)
    raise UsageError(f"--{label} {raw}: not a fedpipe source tree (no {wanted})")


# ------------------------------------------------------------------ Prefect server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(no output)"


@contextlib.contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    """One ``prefect server start`` on a free loopback port for the whole
    comparison (``home`` its ``PREFECT_HOME``); yields its API URL and stops it
    on the way out, whatever happened.

    Raises
    ------
    UsageError
        No ``prefect`` executable, or the server did not answer in time.
    """
    beside = Path(sys.executable).with_name("prefect")
    exe = str(beside) if beside.exists() else shutil.which("prefect")
    if exe is None:
        raise UsageError(f"no `prefect` beside {sys.executable} nor on PATH")
    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.pop("PYTHONPATH", None)
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT="false",
    )
    cmd = [exe, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--analytics-off", "--no-services", "--no-ui"]
    log_path = home / "server.log"
    url = f"http://127.0.0.1:{port}/api"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + SERVER_TIMEOUT_S
            while not is_healthy(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    why = (
                        f"exited with {proc.returncode}"
                        if proc.poll() is not None
                        else f"did not answer within {SERVER_TIMEOUT_S:.0f} s"
                    )
                    raise UsageError(
                        f"the Prefect server ({' '.join(cmd)}) {why}; its last "
                        f"line: {_tail(log_path, 1)}"
                    )
                time.sleep(0.5)
            yield url
        finally:
            _kill_group(proc, grace=20.0)


def _kill_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM ``proc``'s process group (its own session), SIGKILL after
    ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ---------------------------------------------------------------------------- runs


@dataclass
class RunResult:
    """One variant's run with one tree."""

    tree: str
    project: Path
    output: Path
    ok: bool = False
    seconds: float = 0.0
    failure: str = ""  # why it failed, one line

    def tail(self) -> str:
        """The last lines of its output (``init``'s, then ``run``'s)."""
        return _tail(self.output)


class Aborted(Exception):
    """The comparison is being interrupted: start nothing new."""


class Runner:
    """Runs variants in trees, at most ``jobs`` at a time, under ``work``.

    Each run: ``work/<tree>/<variant>/project`` (the project), ``output.txt``
    (what ``init`` and ``run`` printed) and ``prefect-home`` beside it.
    """

    def __init__(
        self,
        trees: Mapping[str, Tree],
        work: Path,
        api_url: str,
        inputs: Path,
        timeout: float = RUN_TIMEOUT_S,
    ) -> None:
        self.trees = trees
        self.work = work
        self.inputs = inputs
        self.timeout = timeout
        self.api_url = api_url
        self._live: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._aborting = False
        self.env = self._base_env()

    def _base_env(self) -> dict[str, str]:
        return run_env(self.work / "shared", self.api_url)

    def abort(self) -> None:
        """Stop every running command and start no new one."""
        with self._lock:
            self._aborting = True
            live = list(self._live)
        for proc in live:
            _kill_group(proc, grace=5.0)

    def run(
        self, variant: Variant, tree: Tree, base: Future[RunResult] | None
    ) -> RunResult:
        """Run ``variant`` with ``tree`` (after ``base``, its base variant's run
        in the same tree, when it has one)."""
        folder = self.work / tree.label / variant.name
        folder.mkdir(parents=True, exist_ok=True)
        result = RunResult(tree.label, folder / "project", folder / "output.txt")
        started = time.perf_counter()
        try:
            with open(result.output, "w") as out:
                env = self.env | {
                    "PYTHONPATH": str(tree.path),
                    "PREFECT_HOME": str(folder / "prefect-home"),
                }
                if base is None:
                    self._fresh(variant, tree, result.project, env, out)
                else:
                    self._from_base(variant, base, result.project)
                self._call(
                    [sys.executable, "-m", tree.cli, "run"]
                    + ["--no-server-start", "--no-report", "-v"],
                    result.project,
                    env,
                    out,
                )
            result.ok = True
        except Aborted:
            result.failure = "not run (interrupted)"
        except CommandFailed as exc:
            result.failure = str(exc)
        except (OSError, yaml.YAMLError) as exc:
            result.failure = f"could not set the project up: {exc}"
        result.seconds = time.perf_counter() - started
        return result

    def _fresh(
        self,
        variant: Variant,
        tree: Tree,
        project: Path,
        env: Mapping[str, str],
        out: Any,
    ) -> None:
        self._call(
            [sys.executable, "-m", tree.cli, "init", project.name],
            project.parent,
            env,
            out,
        )
        (project / "data").mkdir(exist_ok=True)
        if variant.data == "table":
            shutil.copy2(self.inputs / "table.csv", project / "data" / "table.csv")
        elif variant.data == "images":
            shutil.copytree(self.inputs / "images", project / "data" / "images")
        # one secret key of DP noise for every project of both trees (as a user
        # keeps one project's key across a code change): without it each tree's
        # first run makes its own, and a dp-* variant cannot match bit for bit
        from fedpipe.core.secretkey import load_or_create_key

        key = load_or_create_key(self.inputs / "dp.key")
        (project / ".fedpipe").mkdir(mode=0o700, exist_ok=True)
        fd = os.open(project / ".fedpipe/dp.key", os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        params = yaml.safe_load((project / "params.yaml").read_text())
        if variant.tiny:
            params = merge(params, TINY)
        params = merge(params, {"federation": {"rounds": ROUNDS}})
        _write_params(project, with_overrides(params, variant.overrides()))

    def _from_base(
        self, variant: Variant, base: Future[RunResult], project: Path
    ) -> None:
        try:
            done = base.result()
        except CancelledError:
            raise Aborted from None
        if not done.ok:
            raise CommandFailed(f"its base variant {variant.base} failed")
        with self._lock:
            if self._aborting:
                raise Aborted
        shutil.copytree(done.project, project, symlinks=True)
        for rel in RUN_OUTPUTS:
            path = project / rel
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        params = yaml.safe_load((project / "params.yaml").read_text())
        _write_params(project, with_overrides(params, variant.overrides()))

    def _call(
        self, cmd: list[str], cwd: Path, env: Mapping[str, str], out: Any
    ) -> None:
        """Run ``cmd`` (its own session, so that it can be stopped with its
        children); raise :class:`CommandFailed` unless it exits 0."""
        cwd.mkdir(parents=True, exist_ok=True)
        out.write(f"$ {' '.join(cmd[2:])}  (cwd {cwd})\n")
        out.flush()
        with self._lock:
            if self._aborting:
                raise Aborted
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self._live.add(proc)
        try:
            code = proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc, grace=10.0)
            raise CommandFailed(
                f"`{' '.join(cmd[2:4])}` timed out after {self.timeout:.0f} s"
            ) from None
        finally:
            with self._lock:
                self._live.discard(proc)
        with self._lock:
            if self._aborting:
                raise Aborted
        if code != 0:
            raise CommandFailed(f"`{' '.join(cmd[2:4])}` exited with {code}")


class CommandFailed(Exception):
    """A command of a run failed: one line saying which and how."""


def run_env(shared: Path, api_url: str) -> dict[str, str]:
    """The environment of a project's commands: this interpreter's ``bin`` first on
    ``PATH``, the Prefect server at ``api_url``, no analytics, a DVC site cache and
    remote under ``shared`` (nothing under ``~``), no warm stage worker, a git
    identity (scripts/chaos.py uses it too)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    bin_dir = str(Path(sys.executable).parent)
    for sub in ("dvc-site-cache", "dvc-remote"):
        (shared / sub).mkdir(parents=True, exist_ok=True)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PREFECT_API_URL=api_url,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DVC_NO_ANALYTICS="1",
        DVC_SITE_CACHE_DIR=str(shared / "dvc-site-cache"),
        FEDPIPE_DVC_REMOTE=str(shared / "dvc-remote"),
        FEDPIPE_WARM="0",
        GX_ANALYTICS_ENABLED="false",
        TF_CPP_MIN_LOG_LEVEL="3",
        GIT_AUTHOR_NAME="compare_trees",
        GIT_AUTHOR_EMAIL="compare-trees@fedpipe.invalid",
        GIT_COMMITTER_NAME="compare_trees",
        GIT_COMMITTER_EMAIL="compare-trees@fedpipe.invalid",
    )
    return env


def _write_params(project: Path, params: Mapping[str, Any]) -> None:
    """``params.yaml`` without ``round_chain`` (``run`` regenerates it)."""
    body = {k: v for k, v in params.items() if k != "round_chain"}
    (project / "params.yaml").write_text(yaml.safe_dump(body, sort_keys=False))


# ---------------------------------------------------------------------- comparison


@dataclass
class Comparison:
    """How two projects' outputs compare."""

    files: int = 0  # files compared
    lock_outs: int = 0  # dvc.lock outs compared
    differ: list[tuple[str, str]] = field(default_factory=list)  # (name, detail)
    timing_only: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differ


def _excluded(rel: str) -> bool:
    return any(
        rel.startswith(rule) if rule.endswith("/") else rel == rule for rule in EXCLUDED
    )


def output_files(project: Path, skip: Sequence[str] = ()) -> set[str]:
    """Every compared file of ``project`` (relative, POSIX), ``dvc.lock`` and
    ``skip`` (the script's own inputs) left out."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(project):
        rel_dir = Path(dirpath).relative_to(project).as_posix()
        prefix = "" if rel_dir == "." else f"{rel_dir}/"
        dirnames[:] = [d for d in dirnames if not _excluded(f"{prefix}{d}/")]
        for name in filenames:
            rel = f"{prefix}{name}"
            if rel == "dvc.lock" or _excluded(rel):
                continue
            if any(rel == s or rel.startswith(f"{s}/") for s in skip):
                continue
            found.add(rel)
    return found


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_timings(v)
            for k, v in value.items()
            if not (k == TIMING_KEY or str(k).endswith(f"_{TIMING_KEY}"))
        }
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _timing_only(a: Path, b: Path) -> bool:
    """Whether two differing JSON files are equal once their timings are out."""
    if a.suffix != ".json":
        return False
    try:
        return bool(_without_timings(_load_json(a)) == _without_timings(_load_json(b)))
    except (ValueError, OSError):
        return False


def _first_json_difference(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                return f"key {where} only in {'after' if key not in a else 'before'}"
            found = _first_json_difference(a[key], b[key], where)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path or 'top'}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _first_json_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if a != b or type(a) is not type(b):
        return f"{path or 'top'}: {a!r} vs {b!r}"
    return None


def _describe_arrays(a: Path, b: Path) -> str:
    import numpy as np

    def arrays(path: Path) -> dict[str, Any]:
        if path.suffix == ".npy":
            return {"": np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    xa, xb = arrays(a), arrays(b)
    if set(xa) != set(xb):
        return f"array names differ: {sorted(set(xa) ^ set(xb))[:4]}"
    changed, largest = [], 0.0
    for key in sorted(xa):
        u, v = xa[key], xb[key]
        if u.dtype == v.dtype and u.shape == v.shape and u.tobytes() == v.tobytes():
            continue
        changed.append(key or "array")
        if u.shape == v.shape and u.dtype.kind in "fiu" and v.dtype.kind in "fiu":
            gap = np.abs(u.astype(np.float64) - v.astype(np.float64))
            if gap.size:
                largest = max(largest, float(np.nanmax(gap)))
    if not changed:
        return "same arrays, the file's bytes differ (storage)"
    names = ", ".join(changed[:3]) + (", ..." if len(changed) > 3 else "")
    return (
        f"{len(changed)} of {len(xa)} arrays differ ({names}; max |diff| {largest:.3g})"
    )


def describe(a: Path, b: Path) -> str:
    """One line on how two differing files differ."""
    try:
        if a.suffix in (".npz", ".npy"):
            return _describe_arrays(a, b)
        if a.suffix == ".json":
            ja, jb = _load_json(a), _load_json(b)
            found = _first_json_difference(ja, jb)
            return found or "same values, formatted differently"
        if a.suffix in (".csv", ".md", ".yaml", ".txt", ".html"):
            la, lb = a.read_text().splitlines(), b.read_text().splitlines()
            for i, (x, y) in enumerate(zip(la, lb, strict=False), start=1):
                if x != y:
                    return f"line {i} differs: {x[:60]!r} vs {y[:60]!r}"
            return f"{len(la)} vs {len(lb)} lines"
    except (ValueError, OSError, UnicodeDecodeError):
        pass
    sa, sb = a.stat().st_size, b.stat().st_size
    return f"bytes differ ({sa} vs {sb} bytes)"


def lock_outs(project: Path) -> dict[tuple[str, str], str] | None:
    """``{(stage, out path): md5}`` of ``project``'s ``dvc.lock``; None if it has
    none (or it cannot be read)."""
    path = project / "dvc.lock"
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    outs = {}
    for stage, record in (data.get("stages") or {}).items():
        for out in record.get("outs") or []:
            outs[(stage, out["path"])] = str(out.get("md5"))
    return outs


def compare_projects(a: Path, b: Path, skip: Sequence[str] = ()) -> Comparison:
    """Compare the outputs of two finished runs (``a`` before, ``b`` after)."""
    result = Comparison()
    files_a, files_b = output_files(a, skip), output_files(b, skip)
    explained: set[str] = set()
    for rel in sorted(files_a | files_b):
        result.files += 1
        if rel not in files_b or rel not in files_a:
            only = "before" if rel in files_a else "after"
            result.differ.append((rel, f"written only by the {only} run"))
            continue
        fa, fb = a / rel, b / rel
        if fa.read_bytes() == fb.read_bytes():
            continue
        if _timing_only(fa, fb):
            result.timing_only.append(rel)
            explained.add(rel)
            continue
        result.differ.append((rel, describe(fa, fb)))
    differing = {name for name, _ in result.differ}
    outs_a, outs_b = lock_outs(a), lock_outs(b)
    if outs_a is None or outs_b is None:
        who = " and ".join(
            t for t, o in zip(TREES, (outs_a, outs_b), strict=True) if o is None
        )
        result.differ.append(("dvc.lock", f"missing or unreadable ({who})"))
        return result
    for key in sorted(set(outs_a) | set(outs_b)):
        stage, out = key
        if out in EXCLUDED_LOCK_OUTS:
            continue
        result.lock_outs += 1
        name = f"dvc.lock {stage}: {out}"
        if key not in outs_a or key not in outs_b:
            only = "before" if key in outs_a else "after"
            result.differ.append((name, f"recorded only by the {only} run"))
            continue
        if outs_a[key] == outs_b[key]:
            continue
        under = {f for f in files_a | files_b if f == out or f.startswith(f"{out}/")}
        if under and under & explained and not under & differing:
            continue  # its files differ only in timings (reported per file)
        result.differ.append((name, f"md5 {outs_a[key]} vs {outs_b[key]}"))
    return result


# ------------------------------------------------------------------- the report


@dataclass
class Outcome:
    """One variant: its two runs and, when both ran, how their outputs compare."""

    variant: Variant
    runs: dict[str, RunResult]
    comparison: Comparison | None

    @property
    def identical(self) -> bool:
        return self.comparison is not None and self.comparison.identical

    def status(self) -> str:
        failed = [t for t in TREES if not self.runs[t].ok]
        if failed:
            return "RUN FAILED (" + ", ".join(failed) + ")"
        assert self.comparison is not None
        if self.comparison.identical:
            note = " (timings aside)" if self.comparison.timing_only else ""
            return "identical" + note
        return f"DIFFERENT ({len(self.comparison.differ)})"


def progress_line(index: int, total: int, outcome: Outcome) -> str:
    """The line printed as a variant's two runs are done."""
    c = outcome.comparison
    counted = f"{c.files} files, {c.lock_outs} lock outs" if c else "not compared"
    times = "  ".join(f"{t} {outcome.runs[t].seconds:5.1f} s" for t in TREES)
    width = len(str(total))
    return (
        f"[{index:>{width}}/{total}] {outcome.variant.name:<22} "
        f"{outcome.status():<26} {counted:<26} {times}"
    )


def _names(differ: Sequence[tuple[str, str]], limit: int = 3) -> str:
    names = [name for name, _ in differ]
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def report(
    outcomes: Sequence[Outcome], trees: Mapping[str, Tree], *, kept: bool
) -> str:
    """The final table, then every difference and failed run in detail (read
    while the projects still exist: ``kept`` says whether they will stay)."""
    rows = [("variant", "files", "lock outs", "result", "files that differ")]
    for o in outcomes:
        c = o.comparison
        rows.append(
            (
                o.variant.name,
                str(c.files) if c else "-",
                str(c.lock_outs) if c else "-",
                o.status(),
                _names(c.differ) if c and c.differ else "",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "",
        f"before: {trees['before'].path} ({trees['before'].cli})",
        f"after:  {trees['after'].path} ({trees['after'].cli})",
        "",
    ]
    for i, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1])]
        cells += [row[2].rjust(widths[2]), row[3].ljust(widths[3]), row[4]]
        lines.append("  ".join(cells).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 17)
    for o in outcomes:
        c = o.comparison
        if c and c.differ:
            lines += ["", f"{o.variant.name}: {len(c.differ)} difference(s)"]
            lines += [f"  {name}: {detail}" for name, detail in c.differ[:DETAILS]]
            if len(c.differ) > DETAILS:
                lines.append(f"  ... and {len(c.differ) - DETAILS} more")
        if c and c.timing_only:
            lines += [
                "",
                f"{o.variant.name}: equal apart from timings (keys "
                f"'{TIMING_KEY}', '*_{TIMING_KEY}' removed):",
            ]
            lines += [f"  {name}" for name in c.timing_only]
        for tree in TREES:
            run = o.runs[tree]
            if run.ok:
                continue
            where = (
                f"project {run.project}"
                if kept
                else "project removed; --keep DIR keeps it"
            )
            lines += [
                "",
                f"{o.variant.name}: the {tree} run failed: {run.failure} "
                f"({where}); the last lines of its output:",
            ]
            lines += [f"  | {line}" for line in run.tail().splitlines()]
    same = sum(o.identical for o in outcomes)
    lines += ["", f"{same} of {len(outcomes)} variants identical"]
    return "\n".join(lines)


# ------------------------------------------------------------------------- main


def _raise_interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt(signum)


def run_all(
    variants: Sequence[Variant],
    trees: Mapping[str, Tree],
    work: Path,
    jobs: int,
    say: Callable[[str], None],
) -> list[Outcome]:
    """Run every variant with both trees and compare as each pair finishes."""
    inputs = work / "inputs"
    if any(v.data == "table" for v in variants):
        write_table(inputs / "table.csv")
    if any(v.data == "images" for v in variants):
        write_image_folder(inputs / "images")
    skip = ("data/table.csv", "data/images")
    say("starting a Prefect server for both trees' runs ...")
    with prefect_server(work / "prefect-server") as url:
        say(
            f"Prefect server: {url.removesuffix('/api')}; {len(variants)} variants "
            f"x 2 trees, {jobs} run(s) at a time"
        )
        runner = Runner(trees, work, url, inputs)
        futures: dict[tuple[str, str], Future[RunResult]] = {}
        pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="run")
        try:
            for v in variants:  # bases come first: a dependent never waits on a
                for t in TREES:  # run that has not started (FIFO queue)
                    base = futures[(v.base, t)] if v.base else None
                    futures[(v.name, t)] = pool.submit(runner.run, v, trees[t], base)
            outcomes: dict[str, Outcome] = {}
            pending = set(futures.values())
            while pending:
                done, pending = wait(pending, return_when="FIRST_COMPLETED")
                for v in variants:
                    pair = [futures[(v.name, t)] for t in TREES]
                    if v.name in outcomes or not all(f.done() for f in pair):
                        continue
                    runs = {t: f.result() for t, f in zip(TREES, pair, strict=True)}
                    both = all(r.ok for r in runs.values())
                    c = (
                        compare_projects(
                            runs["before"].project, runs["after"].project, skip
                        )
                        if both
                        else None
                    )
                    outcomes[v.name] = Outcome(v, runs, c)
                    say(progress_line(len(outcomes), len(variants), outcomes[v.name]))
        except BaseException:
            runner.abort()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    return [outcomes[v.name] for v in variants]


def list_variants() -> str:
    """``--list``: every variant, what it exercises, what it starts from."""
    lines = []
    for v in VARIANTS:
        start = f"copy of {v.base}" if v.base else f"fresh project, data {v.data}"
        lines.append(f"{v.name:<22} {v.group}  [{start}]")
        if v.settings:
            lines.append(f"{'':<22}   {' '.join(v.settings.split())}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Run the same fedpipe experiments with two source trees and "
        "compare every output file bit for bit (exit 0: all identical).",
    )
    parser.add_argument("--before", metavar="TREE", help="the tree before the change")
    parser.add_argument("--after", metavar="TREE", help="the tree after the change")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="run only these variants (names or shell patterns, e.g. 'dp-*'); the "
        "variants they start from run too",
    )
    parser.add_argument(
        "--keep",
        metavar="DIR",
        type=Path,
        help="keep every project (DIR/<tree>/<variant>/project) and output in DIR "
        "(new or empty); default: a temporary folder, removed at the end",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the variants and exit"
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=2,
        metavar="N",
        help="runs at a time (default 2: a variant's two runs side by side)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        print(list_variants())
        return EXIT_SAME
    try:
        if not args.before or not args.after:
            raise UsageError("--before and --after are both needed (or --list)")
        if args.jobs < 1:
            raise UsageError(f"--jobs {args.jobs}: at least 1")
        trees = {
            "before": resolve_tree("before", args.before),
            "after": resolve_tree("after", args.after),
        }
        variants = select(args.only)
        keep = args.keep.expanduser() if args.keep is not None else None
        if keep is not None and keep.exists():
            if not keep.is_dir() or any(keep.iterdir()):
                raise UsageError(f"--keep {args.keep}: exists and is not empty")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if trees["before"].path == trees["after"].path:
        print(
            "note: --before and --after are the same tree: this checks that the "
            "runs are deterministic from one run to the next",
            flush=True,
        )
    work = (
        keep.resolve()
        if keep is not None
        else Path(tempfile.mkdtemp(prefix="compare-trees-"))
    )
    work.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    started = time.perf_counter()

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        outcomes = run_all(variants, trees, work, args.jobs, say)
        text = report(outcomes, trees, kept=keep is not None)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted: runs stopped, Prefect server stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(text)
    minutes, seconds = divmod(time.perf_counter() - started, 60)
    kept = f"; projects kept in {work}" if keep is not None else ""
    print(f"wall time {int(minutes)} min {seconds:.0f} s{kept}")
    return EXIT_SAME if all(o.identical for o in outcomes) else EXIT_DIFFERENT


if __name__ == "__main__":
    sys.exit(main())
