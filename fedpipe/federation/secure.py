"""The server's side of secure aggregation: :class:`SecureAggregation`.

A strategy wrapper (:mod:`fedpipe.federation.steps`), as central DP's is: the
round never learns what it does. In each round it plays the SecAgg+ protocol
(:mod:`fedpipe.wire.secagg`; Bell et al., CCS 2020):

1. :meth:`~SecureAggregation.start`: the round's sampled clients advertise their
   keys and share their secrets with their neighbours in a random k-regular
   graph (each client's computation, from its own key; the server relays the
   public keys and the ciphertexts).
2. :meth:`~SecureAggregation.client_job`: each client's job gets a
   :class:`~fedpipe.wire.uplink.SecureUplink`: it quantizes its update (with its
   weight, or clipped and noised under distributed DP), masks it and sends only
   the masked vector (on a Dask worker too).
3. :meth:`~SecureAggregation.receive`: the server adds the masked vectors modulo
   2^32; the surviving neighbours reveal their shares (of a survivor's self-mask,
   of a dropped client's mask key: clients that dropped out, failed or missed
   the deadline after sharing), and the server removes the masks. It keeps only
   the sum; each reply it passes on has no weights. When some secret has fewer
   than t shares left, nothing is revealed and the round keeps the previous
   model (:meth:`~SecureAggregation.too_few`, recorded as ``model_kept``).
4. :meth:`~SecureAggregation.aggregate_round`: the inner strategy's server step
   on one update, the mean the sum gives (weighted by the clients' samples; under
   distributed DP over the expected clients, as central DP's).

So the server step, the health record and the oracle view hold only the sum:
no client's update, its norm or its cosine (the doctor says what it cannot see).
Under ``privacy.mechanism: distributed`` each client adds Skellam noise before
masking (:mod:`fedpipe.wire.skellam`), and epsilon is bounded by the Skellam
mechanism's RDP (:mod:`fedpipe.federation.privacy.distributed`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from fedpipe.config.privacy import Privacy, finite_or_inf
from fedpipe.core.seeds import keyed_rng
from fedpipe.federation.round import RoundFailed
from fedpipe.federation.steps import Sampler, StrategyWrapper
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.strategy import AggregationError, ClientUpdate, State, Strategy
from fedpipe.strategy.aggregate import Weights
from fedpipe.wire import secagg
from fedpipe.wire.skellam import client_mu, integer_sensitivity, skellam_mu
from fedpipe.wire.uplink import SecureUplink

#: what the health record says it holds under secure aggregation
HEALTH_NOTE = (
    "secure aggregation: the server saw only the sum of the updates, so this "
    "record has no client's update norm, cosine or aggregation weight"
)


class SecureAggregation(StrategyWrapper):
    """A strategy whose server sees only the sum of the round's updates.

    Parameters
    ----------
    inner : Strategy
        The server strategy (its server step must take one mean update: the
        ``linear`` ones; :mod:`fedpipe.config.wire` refuses the others).
    num_shares, threshold : int or None
        ``secure_aggregation.num_shares`` and ``.reconstruction_threshold``
        (None: :func:`fedpipe.wire.secagg.default_num_shares` of the round's
        clients, and a majority of them).
    clipping_range : float
        ``secure_aggregation.clipping_range``.
    quantization_bits : int
        ``secure_aggregation.quantization_bits``.
    seed : int
        The experiment's seed.
    key : bytes
        The project's secret key (every client's own derives from it). Never
        printed or recorded.
    max_weight : int
        The federation's largest client (training records): each update is
        weighted by ``n / max_weight`` so the weight and the weighted values fit
        the clipping range.
    min_clients : int
        ``federation.min_clients``: a round with fewer survivors is not
        unmasked (it stops as any round short of clients).
    privacy : Privacy or None
        ``privacy.mechanism: distributed`` (None: no DP).
    dimension : int
        The model's coordinates (distributed DP's sensitivity).
    """

    def __init__(
        self,
        inner: Strategy,
        *,
        num_shares: int | None,
        threshold: int | None,
        clipping_range: float,
        quantization_bits: int,
        seed: int,
        key: bytes,
        max_weight: int,
        min_clients: int = 1,
        privacy: Privacy | None = None,
        dimension: int = 0,
    ) -> None:
        super().__init__(inner)
        self.num_shares, self.threshold = num_shares, threshold
        self.clipping_range, self.quantization_bits = clipping_range, quantization_bits
        self.seed, self._key, self.max_weight = seed, key, max(1, int(max_weight))
        self.min_clients, self.privacy, self.dimension = min_clients, privacy, dimension
        self._fresh_round()

    def _fresh_round(self) -> None:
        """No round yet: the per-round state :meth:`start` fills."""
        self.round: int | None = None
        self.epsilon: float | None = None
        self.settings: secagg.SecAggSettings | None = None
        self.graph: dict[int, tuple[int, ...]] = {}
        self.public: dict[int, secagg.PublicKeys] = {}
        self.to: dict[int, dict[int, bytes]] = {}
        self.total: np.ndarray | None = None
        self.survivors: list[int] = []
        self.dropped: list[int] = []
        self.unmasked: str | None = None  # why the sum could not be unmasked

    def __repr__(self) -> str:
        return f"SecureAggregation({self.inner!r})"

    def _copy(self) -> SecureAggregation:
        """The same protocol settings (inner strategy included), no round's state."""
        bound = copy.copy(self)
        bound._fresh_round()
        return bound

    # ------------------------------------------------------------ the round

    def start(self, round_: int, sampled: Sampler) -> SecureAggregation:
        """The protocol's round ``round_`` (a new object): the graph over the
        sampled clients, their advertised keys and their shares, relayed."""
        bound = self._copy()
        bound.round = round_
        if self.privacy is not None:
            bound.epsilon = self._spend(round_, sampled)
        clients = sorted(sampled(round_))
        n = len(clients)
        k = self.num_shares or secagg.default_num_shares(n)
        k = min(k, n - 1) if n > 1 else k
        settings = secagg.SecAggSettings(
            num_shares=k,
            reconstruction_threshold=self.threshold or secagg.default_threshold(k),
            clipping_range=self.clipping_range,
            quantization_bits=self.quantization_bits,
        )
        problem = secagg.settings_problem(settings, n)
        if problem:
            message = f"round {round_}: {problem}"
            raise RoundFailed(
                message, {"round": round_, "clients": [], "stopped": message}
            )
        bound.settings = settings
        rng = keyed_rng(self._key, self.seed, "secagg_graph", round_)
        bound.graph = secagg.neighbours(clients, k, rng)
        secrets = {c: secagg.client_secrets(self._key, c, round_) for c in clients}
        bound.public = {c: secagg.advertise(secrets[c]) for c in clients}
        bound.to = {c: {} for c in clients}
        for u in clients:
            sent = secagg.share_keys(
                u, secrets[u], bound._neighbour_keys(u),
                settings.reconstruction_threshold, round_,
            )  # fmt: skip
            for v, ciphertext in sent.items():
                bound.to[v][u] = ciphertext
        return bound

    def _neighbour_keys(self, client: int) -> dict[int, secagg.PublicKeys]:
        return {v: self.public[v] for v in self.graph[client]}

    def client_job(self, round_: int, job: ClientJob) -> ClientJob:
        """The job with its :class:`SecureUplink` (its neighbours' keys)."""
        assert self.settings is not None, "start(round) before client_job"
        uplink = SecureUplink(
            self.settings,
            self._neighbour_keys(job.task.client),
            key=self._key,
            weight_scale=None if self.privacy else 1.0 / self.max_weight,
            clip_norm=self.privacy.clip_norm if self.privacy else None,
            noise_mu=self._client_mu(),
            keyed_noise=self.privacy.keyed if self.privacy else True,
        )
        return replace(job, uplink=uplink)

    def receive(self, round_: int, before: Weights, returned: list[Any]) -> list[Any]:
        """The masked vectors summed and unmasked (the survivors' sum); the
        replies passed on without them."""
        assert self.settings is not None, "start(round) before receive"
        came = [r for r in returned if isinstance(r, ClientResult) and r.payload]
        self.survivors = sorted(r.client for r in came)
        self.dropped = sorted(set(self.graph) - set(self.survivors))
        out = [replace(r, payload=None) if isinstance(r, ClientResult) else r
               for r in returned]  # fmt: skip
        if len(self.survivors) < max(1, self.min_clients):
            return out  # not unmasked: the round stops short of clients
        total = None
        for r in came:
            total = secagg.add_masked(total, r.payload.arrays[0])
        revealed = {
            v: secagg.reveal(
                v, secagg.client_secrets(self._key, v, round_), self._neighbour_keys(v),
                self.to[v], self.survivors, self.dropped, round_,
            )  # each surviving neighbour's own computation
            for v in self.survivors
        }  # fmt: skip
        try:
            self.total = secagg.unmask(
                total,
                public_keys=self.public,
                graph=self.graph,
                revealed=revealed,
                survivors=self.survivors,
                dropped=self.dropped,
                threshold=self.settings.reconstruction_threshold,
                round_=round_,
            )
        except secagg.UnmaskError as exc:
            # nothing was revealed: the round keeps the previous model, as one
            # with too few updates for its strategy does (recorded), and the
            # next round draws a new graph
            self.total, self.unmasked = None, str(exc)
        return out

    def too_few(self, n_updates: int) -> str | None:
        """Why the round keeps the previous model: the sum could not be
        unmasked (too many clients dropped out after sharing), or the inner
        strategy's own reason."""
        if self.unmasked is not None:
            return self.unmasked
        return self.inner.too_few(n_updates)

    def aggregate_round(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        """The inner strategy's server step on one update: ``global + mean``,
        the mean decoded from the unmasked sum."""
        if self.total is None:
            raise AggregationError("secure aggregation: no unmasked sum this round")
        mean = self.mean_delta(global_weights)
        synthetic = [
            np.asarray(g, dtype=np.float64) + d
            for g, d in zip(global_weights, mean, strict=True)
        ]
        client = updates[0].client if updates else 0
        one = ClientUpdate(client, synthetic, 1)
        return self.inner.aggregate_round(global_weights, [one], state)

    def mean_delta(self, like: Weights) -> Weights:
        """The round's mean update from the unmasked sum, laid out like ``like``:
        the weighted sum over the summed weights, or (distributed DP) the sum
        over the expected clients."""
        assert self.total is not None and self.settings is not None
        flat = secagg.dequantize(
            self.total,
            clipping_range=self.settings.clipping_range,
            bits=self.settings.quantization_bits,
        )
        if self.privacy is None:
            if not flat[0] > 0:
                raise AggregationError(
                    "secure aggregation: the summed weights are not positive"
                )
            flat = flat[1:] / flat[0]
        else:
            flat = flat / self.privacy.expected_clients
        sizes = [int(np.size(w)) for w in like]
        parts = np.split(flat, np.cumsum(sizes)[:-1])
        return [p.reshape(np.shape(w)) for p, w in zip(parts, like, strict=True)]

    def weight_sum(self, updates: Sequence[ClientUpdate]) -> float | None:
        """None: the server never sees one client's weight."""
        return None

    def health(
        self, round_: int, clients: Sequence[int], health: dict[str, Any]
    ) -> dict[str, Any]:
        return {**health, "secure_aggregation": HEALTH_NOTE}

    def record(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the protocol in the ``wire`` block (and, under
        distributed DP, the round's privacy record)."""
        out = dict(fields)
        wire = dict(out.get("wire") or {})
        wire["secure_aggregation"] = self._protocol_record()
        out["wire"] = wire
        if self.privacy is not None:
            out["privacy"] = self._privacy_record()
        return out

    # ------------------------------------------------------------ records

    def _protocol_record(self) -> dict[str, Any]:
        assert self.settings is not None
        length = self.dimension + (0 if self.privacy else 1)
        degrees = [len(vs) for vs in self.graph.values()] or [0]
        per_client = secagg.client_bytes(
            degree=max(degrees), length=length, survived=True, revealed=max(degrees)
        )
        return {
            "protocol": "secagg_plus",
            "num_shares": self.settings.num_shares,
            "reconstruction_threshold": self.settings.reconstruction_threshold,
            "quantization_bits": self.settings.quantization_bits,
            "clipping_range": self.settings.clipping_range,
            "dropped_after_sharing": len(self.dropped),
            "unmasked": self.unmasked is None,
            "key_bytes_per_client": per_client.public_keys + per_client.ciphertexts,
            "masked_vector_bytes": per_client.masked_vector,
            "reveal_bytes_per_client": per_client.revealed_shares,
            "server_bytes": secagg.server_bytes(self.graph, self.survivors),
        }

    # ------------------------------------------------------------ distributed DP

    def _sensitivity(self) -> tuple[float, float]:
        """One client's (l1, l2) in the integer domain (add or remove it)."""
        assert self.privacy is not None
        s = secagg.scale(self.clipping_range, self.quantization_bits)
        return integer_sensitivity(self.privacy.clip_norm, s, self.dimension)

    def _accounted_sensitivity(self) -> tuple[float, float]:
        """What the accountant bounds: replace one client by another, twice
        :meth:`_sensitivity` (as central DP's fixed-size accountant,
        ``rdp-fixed``, does: at one noise multiplier the two epsilons compare)."""
        l1, l2 = self._sensitivity()
        return 2 * l1, 2 * l2

    def _sum_mu(self) -> float:
        """The Skellam mu of the sum of the expected clients' noise."""
        assert self.privacy is not None
        _, l2 = self._sensitivity()
        return skellam_mu(self.privacy.noise_multiplier, l2)

    def _client_mu(self) -> float:
        """Each client's share of the sum's noise (the expected clients')."""
        if self.privacy is None or self.privacy.noise_multiplier == 0.0:
            return 0.0
        return client_mu(
            self._sum_mu(), max(1, math.ceil(self.privacy.expected_clients))
        )

    def _round_mu(self) -> float:
        """The noise a round's sum is sure to hold: its fewest survivors'
        (``federation.min_clients``: a round with fewer is not unmasked)."""
        return self._client_mu() * max(1, self.min_clients)

    def epsilon_after(self, round_: int) -> float:
        """Epsilon at delta after ``round_`` rounds (each accounted with the noise
        of :meth:`_round_mu`: rounds with more survivors hold more)."""
        from fedpipe.federation.privacy.distributed import skellam_epsilon

        assert self.privacy is not None
        l1, l2 = self._accounted_sensitivity()
        epsilon, _ = skellam_epsilon(
            rounds=[self._round_mu()] * round_, l1=l1, l2=l2, delta=self.privacy.delta
        )
        return epsilon

    def _spend(self, round_: int, sampled: Sampler) -> float:
        from fedpipe.federation.privacy.accountant import PrivacyBudgetExceeded

        assert self.privacy is not None
        spent = self.epsilon_after(round_)
        target = self.privacy.target_epsilon
        if target is not None and spent > target:
            raise PrivacyBudgetExceeded(
                f"privacy.target_epsilon={target:g} reached: round {round_} would "
                f"spend ε {spent:.3g} at δ {self.privacy.delta:g}, so the federation "
                "stopped before it; raise privacy.noise_multiplier, "
                "federation.min_clients or privacy.target_epsilon",
                round_=round_,
            )
        return spent

    def _privacy_record(self) -> dict[str, Any]:
        assert self.privacy is not None and self.epsilon is not None
        p = self.privacy
        value = finite_or_inf(self.epsilon)
        l1, l2 = self._accounted_sensitivity()
        return {
            "epsilon": None if value is None else round(value, 6),
            "delta": p.delta,
            "accountant": p.accountant,
            "mechanism": p.mechanism,
            "noise_key": p.noise_key,
            "noise_multiplier": p.noise_multiplier,
            "clip_norm": round(p.clip_norm, 6),
            "skellam_mu_per_client": round(self._client_mu(), 3),
            "skellam_mu_accounted": round(self._round_mu(), 3),
            "neighbours": "replace one client",
            "l2_sensitivity": round(l2, 3),
            "l1_sensitivity": round(l1, 3),
        }
