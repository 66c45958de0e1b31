"""fedpipe: federated-learning experiments as reproducible pipelines.

One TensorFlow op runs on one core (``TF_NUM_INTRAOP_THREADS=1`` unless the
environment says otherwise, set here, before any module starts TensorFlow): a
model's bits then do not depend on how many cores the machine has, and a round
uses the cores by training clients side by side (``runtime.threads``,
:mod:`fedpipe.model.threads`).
"""

import os as _os

_os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
