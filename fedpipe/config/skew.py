"""The names ``partition.feature_skew`` and ``partition.domain_transforms`` take.

One list, read by the ``params.yaml`` schema (:class:`fedpipe.config.params.
PartitionParams`) and by the code that makes and applies the transforms
(:mod:`fedpipe.data.partition.featureskew`); plain tuples, so importing it costs
nothing.
"""

from __future__ import annotations

FEATURE_SKEWS = ("none", "noise", "domains")
"""``partition.feature_skew``: none, Gaussian noise growing with the client's
index (NIID-Bench), or one seeded domain transform per client."""

IMAGE_TRANSFORMS = ("rotation", "contrast", "inversion", "blur", "identity")
"""``partition.domain_transforms`` for images."""

TABLE_TRANSFORMS = ("affine", "identity")
"""``partition.domain_transforms`` for tables."""

DOMAIN_TRANSFORMS = tuple(dict.fromkeys(IMAGE_TRANSFORMS + TABLE_TRANSFORMS))
"""Every name ``partition.domain_transforms`` may list (images' and tables')."""
