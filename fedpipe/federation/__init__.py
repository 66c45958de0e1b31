"""The federation: one round (:mod:`fedpipe.federation.round`), building a round
from settings, client state, records, failures, planted faults, attacks, privacy
and the health record."""
