"""Differential privacy for the federation (``privacy.*``): central DP-FedAvg,
local DP, fixed or adaptive clipping, and an RDP accountant.

- :mod:`~fedpipe.config.privacy`: :class:`~fedpipe.config.privacy.Privacy`
  and the checks of ``privacy.*`` against the federation and strategy;
- :mod:`~fedpipe.federation.privacy.mechanism`: clipping, noise, the adaptive clip
  (local DP's clip and noise are the client's, in its job:
  :mod:`fedpipe.client.localdp`);
- :mod:`~fedpipe.federation.privacy.accountant`: epsilon per round (dp_accounting, RDP);
- :mod:`~fedpipe.federation.privacy.rounds`: :class:`PrivateStrategy`, the strategy
  wrapper :func:`fedpipe.federation.round.run_round` aggregates with.

This package's own import is light (``fedpipe.config.params`` reads the settings
checks); dp_accounting is imported with the accountant. See docs/privacy.md.
"""
