"""Feature skew: each client's inputs changed by a fixed, seeded transform.

On top of any partition (``partition.method`` decides *which* samples a client
holds), ``partition.feature_skew`` changes *what its inputs look like*, as the
feature-skew settings of NIID-Bench (Li et al., ICDE 2022) and the domains of
FedBN (Li et al., ICLR 2021):

- ``noise``: client ``k`` (0-based, of ``N``) gets Gaussian noise of standard
  deviation ``sigma * (k + 1) / N`` added to every input value (NIID-Bench's
  ``Gau(sigma * i / N)`` for party ``i = 1..N``), on the scaled inputs (pixels in
  ``[0, 1]``, table columns as read), not clipped;
- ``domains``: client ``k`` gets the ``k mod T``-th of the listed transforms
  (``partition.domain_transforms``), with seeded strength: images ``rotation``,
  ``contrast`` (contrast and brightness), ``inversion``, ``blur``, ``identity``;
  tables ``affine`` (a per-client shift and rescale of the chosen columns,
  ``partition.domain_columns``) or ``identity``.

On a table both change the measured columns only (numeric and date columns,
:data:`fedpipe.data.kinds.MEASURED_KINDS`): a categorical or text column holds
codes into its values and a boolean column 0/1, which noise or a rescale would
turn into other values, or none; those are left as they are (the noise spec
lists the columns it changes, ``columns``; :func:`skewed_columns` says which
were changed and which left alone).

The partition stage decides every client's transform and records it, numbers
and all, in the manifest (``clients[k]["feature_transform"]``); reading a client's
data (:func:`fedpipe.data.splits.federated_data`) applies it row by row. A row's
result depends on the row alone (the noise is drawn from a generator keyed by the
transform's seed and the row's position in the prepared data), so any chunking
gives the same bits and a client's data is the same in every round and process.
The held-out global test set is never transformed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedpipe.config.skew import FEATURE_SKEWS, IMAGE_TRANSFORMS, TABLE_TRANSFORMS
from fedpipe.core.seeds import derive_seed, rng_for
from fedpipe.data.kinds import MEASURED_KINDS, column_kind, measured_columns
from fedpipe.data.partition.base import PartitionError

__all__ = [
    "FEATURE_SKEWS",
    "IMAGE_TRANSFORMS",
    "TABLE_TRANSFORMS",
    "apply_feature_transform",
    "client_feature_transforms",
    "feature_transformer",
    "skewed_columns",
    "skewed_columns_text",
]

DEFAULT_IMAGE_DOMAINS = ("rotation", "contrast", "inversion", "blur")
DEFAULT_TABLE_DOMAINS = ("affine",)

# the seeded strengths of the domain transforms (documented in docs/partitions.md)
ROTATION_DEGREES = (15.0, 60.0)  # |angle|, either sign
CONTRAST_FACTOR = (0.35, 0.7)  # times the contrast (or its inverse: 1.4 .. 2.9)
BRIGHTNESS_SHIFT = (-0.25, 0.25)  # added, in units of the value range
BLUR_SIGMA = (0.8, 2.0)  # pixels
AFFINE_SCALE = (0.5, 2.0)  # log-uniform
AFFINE_SHIFT = (-1.5, 1.5)  # in units of the column's pooled std


def is_image(input_shape: Sequence[int]) -> bool:
    """Whether samples of ``input_shape`` are images (height, width, channels)."""
    return len(input_shape) == 3


def client_feature_transforms(
    kind: str,
    *,
    n_clients: int,
    seed: int,
    input_shape: Sequence[int],
    value_range: tuple[float, float],
    noise_sigma: float = 0.0,
    domain_transforms: Sequence[str] | None = None,
    domain_columns: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
    pool: np.ndarray | None = None,
    column_types: Mapping[str, str] | None = None,
) -> list[dict[str, Any]] | None:
    """Every client's feature transform, as the manifest records it.

    Parameters
    ----------
    kind : str
        ``partition.feature_skew``: ``none``, ``noise`` or ``domains``.
    n_clients : int
        ``federation.clients``.
    seed : int
        The run's seed; each client's strengths and noise derive from it.
    input_shape : sequence of int
        One sample's shape as the model sees it (3-D: an image).
    value_range : (float, float)
        The scaled inputs' range (the prepared ``value_range`` over ``scale``):
        inversion maps ``lo .. hi`` to ``hi .. lo``, contrast clips to it.
    noise_sigma : float
        ``partition.noise_sigma``, ``>= 0`` (noise only).
    domain_transforms : sequence of str or None
        ``partition.domain_transforms`` (None: rotation, contrast, inversion,
        blur for images; affine for tables).
    domain_columns : sequence of str or None
        ``partition.domain_columns``: the table columns ``affine`` changes (None:
        every feature column).
    feature_names : sequence of str or None
        The table's feature column names, in order.
    pool : numpy.ndarray or None
        Tables, ``affine``: the training pool's scaled rows, ``(n, d)``, whose
        per-column mean and std the shift and rescale are measured in.
    column_types : mapping, optional
        Tables: the columns' kinds (``schema.json`` ``column_types``); only the
        measured ones (numeric, date) are changed. Default: all numeric.

    Returns
    -------
    list of dict or None
        One JSON-ready dict per client (``{"kind": "noise", "std": ..., "seed":
        ...}``, ``{"kind": "rotation", "degrees": ...}``, ...); None for ``none``.

    Raises
    ------
    PartitionError
        An unknown ``partition.feature_skew`` or transform, ``noise_sigma < 0``,
        a transform of images on a table (or the reverse), an unknown column, a
        ``domain_columns`` entry that is not measured (categorical, text,
        boolean), or a table without a measured column; each message names the
        key and what it accepts.
    """
    if kind not in FEATURE_SKEWS:
        raise PartitionError(
            f"partition.feature_skew: unknown {kind!r}; allowed: "
            f"{', '.join(FEATURE_SKEWS)}"
        )
    if kind == "none":
        return None
    image = is_image(input_shape)
    measured = None
    if not image:
        measured = _measured(kind, feature_names, column_types)
    if kind == "noise":
        sigma = _checked_sigma(noise_sigma)
        # a table with a column left alone lists the changed ones (else: all)
        some = measured is not None and len(measured) < len(feature_names or ())
        return [
            {
                "kind": "noise",
                "std": sigma * (k + 1) / n_clients,
                "seed": derive_seed(seed, "feature_skew", k),
                **({"columns": measured} if some else {}),
            }
            for k in range(n_clients)
        ]
    names = _checked_domains(domain_transforms, image=image)
    columns = _checked_columns(
        domain_columns, feature_names, image=image, column_types=column_types
    )
    out = []
    for k in range(n_clients):
        name = names[k % len(names)]
        rng = rng_for(seed, "feature_skew", k)
        out.append(_domain(name, rng, value_range, columns, pool))
    return out


def skewed_columns(
    feature_names: Sequence[str],
    column_types: Mapping[str, str] | None,
    domain_columns: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Which of a table's columns feature skew changes and which it leaves.

    Returns
    -------
    dict
        ``{"skewed": [names], "left_alone": {name: kind}}`` (plain JSON, for
        the manifest and the partition report): the measured columns (those of
        ``domain_columns`` when given), and every other column with its kind.
    """
    names = [str(n) for n in feature_names]
    chosen = set(domain_columns) if domain_columns is not None else None
    skewed = [
        n
        for n in names
        if column_kind(n, column_types) in MEASURED_KINDS
        and (chosen is None or n in chosen)
    ]
    return {
        "skewed": skewed,
        "left_alone": {
            n: column_kind(n, column_types) for n in names if n not in skewed
        },
    }


def skewed_columns_text(columns: Mapping[str, Any]) -> str:
    """One line of :func:`skewed_columns`' record: ``feature skew changed 3
    numeric/date column(s) (a, b, c); left alone: color (categorical)``."""
    skewed = [str(c) for c in columns.get("skewed") or []]
    left = dict(columns.get("left_alone") or {})
    shown = ", ".join(skewed[:12]) + (f", ... ({len(skewed) - 12} more)"
                                      if len(skewed) > 12 else "")  # fmt: skip
    text = f"feature skew changed {len(skewed)} numeric/date column(s) ({shown})"
    if left:
        text += "; left alone: " + ", ".join(f"{n} ({k})" for n, k in left.items())
    return text


def _measured(
    kind: str,
    feature_names: Sequence[str] | None,
    column_types: Mapping[str, str] | None,
) -> list[int]:
    """The table's measured columns; none at all is refused."""
    names = [str(n) for n in (feature_names or [])]
    measured = measured_columns(names, column_types)
    if names and not measured:
        kinds = sorted({column_kind(n, column_types) for n in names})
        raise PartitionError(
            f"partition.feature_skew: {kind} changes numeric and date columns "
            f"only, and every feature column of this table is {' or '.join(kinds)}"
            "; set partition.feature_skew: none"
        )
    return measured


def _checked_sigma(sigma: object) -> float:
    if (
        isinstance(sigma, bool)
        or not isinstance(sigma, int | float)
        or not math.isfinite(sigma)
        or sigma < 0
    ):
        raise PartitionError(
            f"partition.noise_sigma must be a number >= 0, got {sigma!r}"
        )
    return float(sigma)


def _checked_domains(names: Sequence[str] | None, *, image: bool) -> list[str]:
    allowed = IMAGE_TRANSFORMS if image else TABLE_TRANSFORMS
    what = "images" if image else "tables"
    if names is None:
        return list(DEFAULT_IMAGE_DOMAINS if image else DEFAULT_TABLE_DOMAINS)
    names = list(names)
    if not names:
        raise PartitionError(
            f"partition.domain_transforms is empty; list at least one of "
            f"{', '.join(allowed)} (for {what}), or null for the default"
        )
    for name in names:
        if name not in allowed:
            raise PartitionError(
                f"partition.domain_transforms: unknown {name!r} for {what}; "
                f"allowed: {', '.join(allowed)}"
            )
    return names


def _checked_columns(
    columns: Sequence[str] | None,
    feature_names: Sequence[str] | None,
    *,
    image: bool,
    column_types: Mapping[str, str] | None = None,
) -> list[int] | None:
    if image:
        if columns is not None:
            raise PartitionError(
                "partition.domain_columns is for tables; set it to null for images"
            )
        return None
    names = [str(n) for n in (feature_names or [])]
    measured = measured_columns(names, column_types)
    if columns is None:
        return measured
    allowed = [names[j] for j in measured]
    shown = ", ".join(allowed[:12]) + (" ..." if len(allowed) > 12 else "")
    missing = [c for c in columns if c not in names]
    if missing:
        raise PartitionError(
            f"partition.domain_columns: {', '.join(map(repr, missing))} is not a "
            f"feature column; allowed: {shown}"
        )
    unmeasured = [c for c in columns if names.index(c) not in measured]
    if unmeasured:
        said = ", ".join(f"{c!r} ({column_kind(c, column_types)})" for c in unmeasured)
        raise PartitionError(
            f"partition.domain_columns: {said} is not a numeric or date column "
            f"(affine would turn its codes or 0/1 into other values); allowed: "
            f"{shown}"
        )
    return [names.index(c) for c in columns]


def _uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(*bounds))


def _domain(
    name: str,
    rng: np.random.Generator,
    value_range: tuple[float, float],
    columns: list[int] | None,
    pool: np.ndarray | None,
) -> dict[str, Any]:
    """One client's domain transform, its strengths drawn from ``rng``."""
    lo, hi = float(value_range[0]), float(value_range[1])
    if name == "identity":
        return {"kind": "identity"}
    if name == "rotation":
        sign = 1.0 if rng.random() < 0.5 else -1.0
        return {"kind": "rotation", "degrees": sign * _uniform(rng, ROTATION_DEGREES)}
    if name == "contrast":
        factor = _uniform(rng, CONTRAST_FACTOR)
        if rng.random() < 0.5:
            factor = 1.0 / factor
        shift = _uniform(rng, BRIGHTNESS_SHIFT) * (hi - lo)
        return {"kind": "contrast", "factor": factor, "shift": shift, "range": [lo, hi]}
    if name == "inversion":
        return {"kind": "inversion", "range": [lo, hi]}
    if name == "blur":
        return {"kind": "blur", "sigma": _uniform(rng, BLUR_SIGMA)}
    # affine (tables): measured in the pool's column statistics
    assert columns is not None and pool is not None
    chosen = pool[:, columns].astype(np.float64)
    present = ~np.isnan(chosen)
    count = np.maximum(present.sum(axis=0), 1)
    values = np.where(present, chosen, 0.0)
    mean = values.sum(axis=0) / count  # missing values left out (0 if none)
    std = np.sqrt(np.where(present, (chosen - mean) ** 2, 0.0).sum(axis=0) / count)
    std = np.where(std > 0, std, 1.0)  # a constant column shifts in its own units
    scale = np.exp(rng.uniform(*np.log(AFFINE_SCALE), size=len(columns)))
    shift = rng.uniform(*AFFINE_SHIFT, size=len(columns)) * std
    return {
        "kind": "affine",
        "columns": columns,
        "center": mean.tolist(),
        "scale": scale.tolist(),
        "shift": shift.tolist(),
    }


# ---------------------------------------------------------------- applying


def apply_feature_transform(
    spec: Mapping[str, Any], x: np.ndarray, positions: np.ndarray
) -> np.ndarray:
    """Rows ``x`` (float32, ``(n, *input_shape)``) under one client's transform.

    Parameters
    ----------
    spec : mapping
        The client's ``feature_transform`` from the manifest.
    x : numpy.ndarray
        The scaled rows, as :func:`fedpipe.data.sources.to_features` gives them.
    positions : numpy.ndarray
        Each row's position in the prepared data (keys the noise).

    Returns
    -------
    numpy.ndarray
        float32, the shape of ``x``; each row a function of that row (and its
        position) alone.
    """
    kind = spec["kind"]
    try:
        apply = _APPLY[kind]
    except KeyError:
        raise PartitionError(
            f"manifest: unknown feature_transform {kind!r}; allowed: "
            f"{', '.join(_APPLY)} (re-run the partition stage)"
        ) from None
    return apply(spec, x, np.asarray(positions, dtype=np.int64)).astype(
        np.float32, copy=False
    )


def feature_transformer(
    spec: Mapping[str, Any] | None,
) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """``(x, positions) -> x`` for a client's recorded transform (None: none)."""
    if spec is None or spec.get("kind") == "identity":
        return None
    frozen = dict(spec)
    return lambda x, positions: apply_feature_transform(frozen, x, positions)


def _noise(spec: Mapping[str, Any], x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    std = np.float32(spec["std"])
    if std == 0 or len(x) == 0:
        return x
    seed = int(spec["seed"])
    shape = x.shape[1:]
    noise = np.stack(
        [
            np.random.default_rng([seed, int(p)]).standard_normal(
                shape, dtype=np.float32
            )
            for p in pos
        ]
    )
    if "columns" not in spec:
        return x + std * noise
    # a table's listed columns only (the same draws, so the same bits there)
    columns = np.asarray(spec["columns"], dtype=np.int64)
    out = x.copy()
    out[:, columns] = x[:, columns] + std * noise[:, columns]
    return out


def _identity(spec: Mapping[str, Any], x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return x


def _inversion(spec: Mapping[str, Any], x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    lo, hi = spec["range"]
    return np.float32(lo + hi) - x


def _contrast(spec: Mapping[str, Any], x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    lo, hi = spec["range"]
    axes = tuple(range(1, x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64).astype(np.float32)
    out = (x - mean) * np.float32(spec["factor"]) + mean + np.float32(spec["shift"])
    return np.clip(out, np.float32(lo), np.float32(hi))


def _rotation(spec: Mapping[str, Any], x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Rotate each image about its centre (bilinear; outside: the image's
    top-left pixel, so the background stays the background)."""
    n, h, w, c = x.shape
    theta = math.radians(float(spec["degrees"]))
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    # source coordinates of each output pixel (inverse rotation)
    sy = cy + (yy - cy) * math.cos(theta) - (xx - cx) * math.sin(theta)
    sx = cx + (yy - cy) * math.sin(theta) + (xx - cx) * math.cos(theta)
    eps = 1e-6  # a source pixel on the border, up to rounding, is inside
    inside = (
        (sy >= -eps) & (sy <= h - 1 + eps) & (sx >= -eps) & (sx <= w - 1 + eps)
    ).ravel()
    sy, sx = np.clip(sy, 0, h - 1), np.clip(sx, 0, w - 1)
    y0, x0 = np.floor(sy).astype(np.int64), np.floor(sx).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (sy - y0).ravel(), (sx - x0).ravel()
    flat = x.reshape(n, h * w, c)
    out = np.zeros((n, h * w, c), dtype=np.float32)
    # the four neighbours' bilinear weights, per output pixel
    for rows, cols, weight in (
        (y0, x0, (1 - fy) * (1 - fx)),
        (y0, x1, (1 - fy) * fx),
        (y1, x0, fy * (1 - fx)),
        (y1, x1, fy * fx),
    ):
        index = (rows * w + cols).ravel()
        out += np.take(flat, index, axis=1) * weight.astype(np.float32)[None, :, None]
    out = np.where(inside[None, :, None], out, flat[:, :1, :])
    return out.reshape(x.shape)


def _blur(spec: Mapping[str, Any], x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Separable Gaussian blur over height and width (edges reflected)."""
    sigma = float(spec["sigma"])
    radius = max(1, int(math.ceil(3 * sigma)))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps = (taps / taps.sum()).astype(np.float32)
    out = x
    for axis in (1, 2):
        size = out.shape[axis]
        pad = [(0, 0)] * out.ndim
        pad[axis] = (radius, radius)
        padded = np.pad(out, pad, mode="reflect" if size > radius else "edge")
        moved = np.moveaxis(padded, axis, 0)  # a view: slices along axis 0
        acc = taps[0] * moved[0:size]
        for i in range(1, len(taps)):
            acc += taps[i] * moved[i : i + size]
        out = np.moveaxis(acc, 0, axis)
    return np.ascontiguousarray(out)


def _affine(spec: Mapping[str, Any], x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    columns = np.asarray(spec["columns"], dtype=np.int64)
    center = np.asarray(spec["center"], dtype=np.float32)
    scale = np.asarray(spec["scale"], dtype=np.float32)
    shift = np.asarray(spec["shift"], dtype=np.float32)
    out = x.copy()
    out[:, columns] = (x[:, columns] - center) * scale + center + shift
    return out


_APPLY: dict[str, Callable[[Mapping[str, Any], np.ndarray, np.ndarray], np.ndarray]]
_APPLY = {
    "noise": _noise,
    "identity": _identity,
    "rotation": _rotation,
    "contrast": _contrast,
    "inversion": _inversion,
    "blur": _blur,
    "affine": _affine,
}
