"""FedProx (Li et al., 2020): FedAvg on the server, a proximal term on clients."""

from __future__ import annotations

from fedpipe.core.component import Setting
from fedpipe.strategy.fedavg import FedAvg

PROXIMAL_MU = Setting(
    "proximal_mu", float, default=0.01, ge=0.0, help="weight of the proximal term"
)
"""``strategy.proximal_mu``: FedProx passes it on to its clients."""


class FedProx(FedAvg):
    """FedAvg aggregation; clients add ``mu/2 ||w - w_t||^2`` to their local loss.

    The server side is exactly :class:`~fedpipe.strategy.fedavg.FedAvg`; the
    algorithm lives in the clients, which read ``proximal_mu`` from
    :meth:`client_settings` and minimise

    .. math:: F_i(w) + \\frac{\\mu}{2} \\lVert w - w_t \\rVert^2

    starting from the global weights :math:`w_t` (Flower's ``fedprox.py`` does the
    same: it only forwards ``proximal_mu`` in the fit config).
    Paper: https://arxiv.org/abs/1812.06127

    Parameters
    ----------
    proximal_mu : float, default 0.01
        :math:`\\mu \\ge 0`, weight of the proximal term; 0 is FedAvg.
    """

    name = "fedprox"
    settings = (PROXIMAL_MU,)
    client_algorithm = "fedprox"

    def __init__(self, *, proximal_mu: float = 0.01) -> None:
        self.proximal_mu = self.checked(PROXIMAL_MU, proximal_mu)

    def client_settings(self) -> dict[str, float]:
        """``{"proximal_mu": mu}`` for the clients' local objective."""
        return {"proximal_mu": self.proximal_mu}
