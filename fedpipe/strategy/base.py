"""The strategy contract: how the server turns client updates into new weights.

A strategy is a small, stateless object built from its ``strategy.*`` settings.
Whatever it must remember between rounds (momentum, moments, control variates)
lives in an explicit :data:`State` that the caller stores and passes back, so a
round can be re-run from files alone::

    strategy = make_strategy("fedadam", server_lr=0.1)
    state = strategy.init_state(weights)                        # before round 1
    weights, state = strategy.aggregate_round(weights, updates, state)
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from fedpipe.core.component import Component, Setting
from fedpipe.strategy.aggregate import AggregationError, Weights, first_non_finite

State = dict[str, np.ndarray]
"""Server state: flat names to arrays, e.g. ``"m/003"`` for layer 3's first moment."""


# ---------------------------------------------------------------- client updates


@dataclass(frozen=True)
class ClientUpdate:
    """What one client sends back after local training.

    Attributes
    ----------
    client : int
        Client id (0-based).
    weights : list of ndarray
        The client's full weight list after local training.
    n_samples : int
        Number of local training samples (the weight of weighted averages).
    extras : mapping of str to list of ndarray, default empty
        Further per-layer arrays a strategy needs, laid out like ``weights``;
        e.g. Scaffold reads ``extras["control_delta"]``. Other strategies ignore
        them.
    steps : int or None, default None
        Local optimizer steps that produced ``weights`` (FedNova normalizes each
        update by them); None: not reported.
    """

    client: int
    weights: Weights
    n_samples: int
    extras: Mapping[str, Weights] = field(default_factory=dict)
    steps: int | None = None


# ---------------------------------------------------------------- state layout


def state_key(prefix: str, layer: int) -> str:
    """The state name of ``prefix``'s array for ``layer``: ``"m/003"``."""
    return f"{prefix}/{layer:03d}"


def state_arrays(
    state: Mapping[str, np.ndarray], prefix: str, n_layers: int
) -> Weights:
    """``prefix``'s per-layer arrays from ``state``, in layer order, as float64."""
    return [
        np.asarray(state[state_key(prefix, k)], dtype=np.float64)
        for k in range(n_layers)
    ]


def pack_state(**per_layer: Sequence[np.ndarray]) -> State:
    """A :data:`State` from per-layer arrays: ``pack_state(m=[...], v=[...])``."""
    return {
        state_key(prefix, k): np.asarray(a)
        for prefix, arrays in per_layer.items()
        for k, a in enumerate(arrays)
    }


# ---------------------------------------------------------------- settings


SERVER_LR = Setting("server_lr", float, gt=0.0, help="server learning rate")
"""``strategy.server_lr``, shared by the strategies that take a server step."""


# ---------------------------------------------------------------- the contract


class Strategy(Component, abc.ABC):
    """A server strategy: new global weights from the current ones and updates.

    Subclasses set :attr:`name` (the ``strategy.name`` value), list the
    ``strategy.*`` keys they read in :attr:`settings` (each one a keyword-only
    constructor argument and an attribute of the same name) and implement
    :meth:`aggregate`. Callers use :meth:`aggregate_round`, which checks and
    orders the updates first.

    Contract for :meth:`aggregate` implementations

    * deterministic: no randomness, float64 arithmetic in the given (client-id)
      order, results cast back to each global layer's dtype;
    * pure: inputs arrive read-only and must not be modified; the new state is a
      new dict;
    * stateless: everything carried between rounds is in the returned state.

    Attributes
    ----------
    name : str
        The ``strategy.name`` this class is registered under
        (:data:`fedpipe.core.registry.STRATEGIES`).
    settings : tuple of Setting
        The ``strategy.*`` keys this strategy reads, each declared with its type,
        default and range (:class:`~fedpipe.core.component.Setting`; a user's
        strategy may list plain names, the keys of ``strategy.options``).
        ``total_clients``, the number of clients in the federation, is passed to
        every strategy that lists it.
    state_names : tuple of str
        Per-layer float64 state arrays, named ``"<prefix>/<layer:03d>"`` and
        initialised to zeros by :meth:`init_state`.
    required_extras : tuple of str
        Keys every :attr:`ClientUpdate.extras` must hold, laid out like the weights.
    client_algorithm : str or type
        The client algorithm this strategy needs: a name in
        :data:`fedpipe.core.registry.CLIENT_ALGORITHMS`, a reference to a user's
        class (``path/to/file.py:Name``), or the class itself (a plugin's strategy
        and client in one file); it is built from :meth:`client_settings`.
        Default ``"sgd"``.

    Traits (what the rest of fedpipe may assume about the server step)

    linear : bool
        The step depends on the clients only through the sample-weighted mean of
        their weights (FedAvg and the server optimizers on it), so central DP may
        stand one noised mean in for it (:mod:`fedpipe.config.privacy`).
    no_privacy : str or None
        Why no DP mechanism here covers this strategy (SCAFFOLD: its control
        variates travel unclipped); None: one does.
    robust_share : float or None
        The malicious share of the clients below which this robust aggregator
        holds (median, trimmed mean, Krum: 0.5); None: not a robust aggregator.
    weight_sum_setting : str or None
        The setting the doctor expects the fitted weights of a linear step to
        sum to (FedAvgM, SCAFFOLD: ``server_lr``); None: they sum to 1.

    The fewest updates a round must bring for :meth:`aggregate` (Krum's
    ``2f + 3``, Bulyan's ``4f + 3``; 1 by default) is declared by
    :meth:`min_updates`: ``params.yaml`` is refused before any stage runs when
    the clients sampled per round are fewer (or, after ``federation.dropout``,
    most rounds' survivors), and a round that gets fewer anyway keeps the
    previous global model and records why (:meth:`too_few`), as Flower's
    server keeps its parameters when a strategy returns none.
    """

    name: ClassVar[str]
    section: ClassVar[str] = "strategy"
    settings: ClassVar[tuple[str, ...]] = ()
    state_names: ClassVar[tuple[str, ...]] = ()
    required_extras: ClassVar[tuple[str, ...]] = ()
    client_algorithm: ClassVar[str | type] = "sgd"
    linear: ClassVar[bool] = False
    no_privacy: ClassVar[str | None] = None
    robust_share: ClassVar[float | None] = None
    weight_sum_setting: ClassVar[str | None] = None

    # ------------------------------------------------------------ minimum

    @classmethod
    def min_updates(cls, values: Mapping[str, Any]) -> tuple[int, str]:
        """The fewest client updates a round needs for :meth:`aggregate`, from
        the ``strategy.*`` values, and why in words naming the keys
        (``"2 * strategy.num_byzantine + 3 = 5"``). Default: 1, any round."""
        return 1, "1"

    def too_few(self, n_updates: int) -> str | None:
        """Why this strategy cannot aggregate ``n_updates`` updates (one line
        naming the keys; the round then keeps the previous global model), or
        None when it can."""
        values = {str(k): getattr(self, str(k), None) for k in self.settings}
        need, why = type(self).min_updates(values)
        if n_updates >= need:
            return None
        return (
            f"{n_updates} usable update(s); strategy.name={self.name} needs {why}: "
            "the previous global model kept"
        )

    # ------------------------------------------------------------ state

    def init_state(self, global_weights: Weights) -> State:
        """The server state before round 1: zeros (float64) per :attr:`state_names`."""
        return {
            name: np.zeros(shape, dtype=np.float64)
            for name, shape in self.state_shapes(global_weights).items()
        }

    def state_shapes(self, global_weights: Weights) -> dict[str, tuple[int, ...]]:
        """Name and shape of every state array for a model shaped like this."""
        return {
            state_key(prefix, k): np.shape(w)
            for prefix in self.state_names
            for k, w in enumerate(global_weights)
        }

    # ------------------------------------------------------------ aggregation

    @abc.abstractmethod
    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        """New global weights and server state from checked, ordered updates.

        Parameters
        ----------
        global_weights : list of ndarray
            The weights the clients started from (read-only).
        updates : sequence of ClientUpdate
            At least one, sorted by client id, finite and shaped like
            ``global_weights`` (read-only).
        state : State
            This strategy's state after the previous round (read-only).
        """

    def aggregate_round(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        """Check updates and state, order updates by client id, and aggregate.

        Refuses, with :class:`AggregationError` naming the client: no updates, two
        updates from one client, a negative sample or step count, a layer count or shape
        that differs from the global model, NaN or inf in weights or extras, a
        missing required extra. Also refuses a state that does not fit (wrong
        names or shapes) and a result that is not finite. Inputs are not modified.

        Returns
        -------
        weights : list of ndarray
            New arrays, each with the global layer's shape and dtype.
        state : State
            New server state.
        """
        reference = [_readonly(w) for w in global_weights]
        layer = first_non_finite(reference)
        if layer is not None:
            raise AggregationError(
                f"the global weights hold non-finite values in layer {layer}"
            )
        if not updates:
            raise AggregationError("no client updates to aggregate")
        ordered = sorted(updates, key=lambda u: u.client)
        for before, after in itertools.pairwise(ordered):
            if before.client == after.client:
                raise AggregationError(
                    f"client {after.client} sent more than one update this round"
                )
        checked = [self._checked_update(u, reference) for u in ordered]
        current = self._checked_state(state, reference)
        new_weights, new_state = self.aggregate(reference, checked, current)
        return self._checked_result(new_weights, reference), {
            k: np.array(v) for k, v in new_state.items()
        }

    def client_settings(self) -> dict[str, Any]:
        """Settings of the :attr:`client_algorithm` (FedProx: ``proximal_mu``)."""
        return {}

    def weight_sum(self, updates: Sequence[ClientUpdate]) -> float | None:
        """What the weights of this round's step on the client updates
        (``w_new - w = sum_i a_i (w_i - w)``) sum to, when that depends on the
        updates (FedNova: their local steps); the round writes it into the health
        record for the doctor. None: 1, or :attr:`weight_sum_setting`."""
        return None

    def broadcast(self, state: State) -> dict[str, Weights]:
        """What every selected client receives besides the global weights, laid
        out like them (SCAFFOLD: the server control variate ``"c"``). Default:
        nothing. Read-only for the clients."""
        return {}

    # ------------------------------------------------------------ checks

    def _checked_update(self, update: ClientUpdate, reference: Weights) -> ClientUpdate:
        who = f"client {update.client}"
        if update.n_samples < 0:
            raise AggregationError(f"{who} reports n_samples = {update.n_samples}")
        if update.steps is not None and update.steps < 0:
            raise AggregationError(f"{who} reports steps = {update.steps}")
        weights = _checked_layers(update.weights, reference, who, "")
        missing = [k for k in self.required_extras if k not in update.extras]
        if missing:
            raise AggregationError(
                f"{who} sent no extras[{missing[0]!r}], which strategy.name = "
                f"{self.name!r} needs from every client"
            )
        extras = {
            key: _checked_layers(arrays, reference, who, f" of extras[{key!r}]")
            for key, arrays in update.extras.items()
        }
        return replace(update, weights=weights, extras=extras)

    def _checked_state(
        self, state: Mapping[str, np.ndarray], reference: Weights
    ) -> State:
        expected = self.state_shapes(reference)
        missing = sorted(set(expected) - set(state))
        extra = sorted(set(state) - set(expected))
        if missing or extra:
            raise AggregationError(
                f"server state does not fit strategy {self.name!r}: missing "
                f"{missing[:3]}, unexpected {extra[:3]}; start from "
                "strategy.init_state(weights) (did strategy.name change?)"
            )
        out: State = {}
        for key, shape in expected.items():
            arr = _readonly(state[key])
            if arr.shape != shape:
                raise AggregationError(
                    f"server state {key!r}: shape {arr.shape} differs from the "
                    f"model's {shape}"
                )
            if not np.all(np.isfinite(arr)):
                raise AggregationError(f"server state {key!r} holds non-finite values")
            out[key] = arr
        return out

    def _checked_result(self, weights: Weights, reference: Weights) -> Weights:
        if len(weights) != len(reference):
            raise AggregationError(
                f"{self.name} returned {len(weights)} layers for a "
                f"{len(reference)}-layer model"
            )
        out = [
            np.array(w, dtype=r.dtype) for w, r in zip(weights, reference, strict=True)
        ]
        hint = " (lower strategy.server_lr?)" if "server_lr" in self.settings else ""
        _check_layout(
            out,
            reference,
            misshapen=lambda k: (
                f"{self.name} returned shape {out[k].shape} for "
                f"layer {k} of shape {reference[k].shape}"
            ),
            non_finite=lambda k: (
                f"{self.name} produced non-finite weights in layer {k}{hint}"
            ),
        )
        return out


def _readonly(array: Any) -> np.ndarray:
    """A read-only view, so an implementation cannot modify the caller's arrays."""
    view = np.asarray(array).view()
    view.flags.writeable = False
    return view


def _checked_layers(
    arrays: Sequence[np.ndarray], reference: Weights, who: str, what: str
) -> Weights:
    """Read-only views of ``arrays`` after checking layout and finiteness."""
    if len(arrays) != len(reference):
        raise AggregationError(
            f"{who} sent {len(arrays)} layers{what}; the global model has "
            f"{len(reference)}"
        )
    out = [_readonly(a) for a in arrays]
    _check_layout(
        out,
        reference,
        misshapen=lambda k: (
            f"{who}: layer {k}{what} has shape {out[k].shape}; the "
            f"global model's is {reference[k].shape}"
        ),
        non_finite=lambda k: (
            f"{who} sent non-finite values in layer {k}{what}; "
            "refusing to aggregate (lower train.lr or check its data)"
        ),
    )
    return out


def _check_layout(
    out: Sequence[np.ndarray],
    reference: Weights,
    *,
    misshapen: Callable[[int], str],
    non_finite: Callable[[int], str],
) -> None:
    """Raise an AggregationError saying ``misshapen(k)`` for the first layer
    ``k`` of ``out`` shaped unlike ``reference``'s, else ``non_finite(k)`` for
    the first that holds a NaN or inf (``out`` and ``reference`` are as long)."""
    for k, (got, ref) in enumerate(zip(out, reference, strict=True)):
        if got.shape != ref.shape:
            raise AggregationError(misshapen(k))
    layer = first_non_finite(out)
    if layer is not None:
        raise AggregationError(non_finite(layer))
