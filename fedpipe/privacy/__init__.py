"""Differential privacy for the federation (``privacy.*``): central DP-FedAvg,
local DP, fixed or adaptive clipping, and an RDP accountant.

- :mod:`~fedpipe.privacy.settings`: :class:`~fedpipe.privacy.settings.Privacy`
  and the checks of ``privacy.*`` against the federation and strategy;
- :mod:`~fedpipe.privacy.mechanism`: clipping, noise, the adaptive clip;
- :mod:`~fedpipe.privacy.accountant`: epsilon per round (dp_accounting, RDP);
- :mod:`~fedpipe.privacy.rounds`: what :func:`fedpipe.round.run_round` calls.

This package's own import is light (``fedpipe.config`` reads the settings
checks); dp_accounting is imported with the accountant. See docs/privacy.md.
"""
