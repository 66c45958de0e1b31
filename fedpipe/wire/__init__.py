"""What crosses the wire between a client and the server.

Compression of a client's update (:mod:`fedpipe.wire.compression`), secure
aggregation (:mod:`fedpipe.wire.secagg`, on Shamir sharing,
:mod:`fedpipe.wire.shamir`) and the integer noise of distributed differential
privacy (:mod:`fedpipe.wire.skellam`). Pure functions on NumPy arrays and bytes:
no Keras, Prefect or DVC; the round applies them (:mod:`fedpipe.federation`).
"""
