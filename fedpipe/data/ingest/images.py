"""Ingest a folder of images, one subfolder per class, into the prepared format."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from fedpipe.data.ingest.base import IngestError, IngestResult
from fedpipe.data.ingest.prepared import STATUS_OK, _PreparedWriter

__all__ = ["COLOR_MODES", "RESAMPLE", "ingest_image_folder", "is_os_metadata"]

COLOR_MODES: dict[str, str] = {"rgb": "RGB", "grayscale": "L"}
"""``data.color_mode`` values and the Pillow mode each converts to."""

RESAMPLE = Image.Resampling.BILINEAR
"""The one resampling filter used to resize every image."""

_CHANNELS_OF_MODE = {"P": 3, "PA": 4}
_MAX_REASON = 160

# What Windows and macOS write into folders by themselves (lower case). Files:
# thumbnail caches, folder view settings, Finder metadata; folders: the resource
# forks of a zip made on macOS, Spotlight / trash / recycle bin / restore points.
_OS_METADATA_FILES = frozenset(
    {"thumbs.db", "ehthumbs.db", "ehthumbs_vista.db", "desktop.ini", ".ds_store",
     ".localized", "icon\r"}
)  # fmt: skip
_OS_METADATA_DIRS = frozenset(
    {"__macosx", ".spotlight-v100", ".trashes", ".fseventsd", ".temporaryitems",
     "$recycle.bin", "system volume information"}
)  # fmt: skip
_APPLE_DOUBLE_PREFIX = "._"  # macOS resource fork of the file named after it


@dataclass(frozen=True)
class _ImageFile:
    sample_id: str  # "<class folder>/<file name>"
    label: int
    path: Path


@dataclass(frozen=True)
class _Decoded:
    pixels: np.ndarray | None  # (H, W, C) uint8, None when unreadable
    orig_shape: tuple[int, int, int]  # height, width, channels; zeros if unreadable
    status: str


def ingest_image_folder(
    path: Path,
    *,
    out_dir: Path,
    image_size: tuple[int, int],
    color_mode: str = "rgb",
    classes: Sequence[str] | None = None,
    class_level: int = 0,
) -> IngestResult:
    """Decode, convert and resize a folder of class subfolders into ``out_dir``.

    ``path`` holds one subfolder per class; the sorted folder names (or the
    order of ``classes``) become classes ``0 .. K-1``. Every non-hidden file
    *directly* inside a class folder is a sample: nested subfolders, hidden entries
    (names starting with ``.``) and files at the top level of ``path`` are
    ignored. Files are read in sorted order (class, then file name; Unicode
    code-point order, independent of locale).

    With ``class_level`` ``L > 0`` the class folders sit ``L`` folder levels
    down, e.g. ``path/<writer>/<class>/x.png`` for ``L = 1`` (a writer per folder,
    as FEMNIST's writers): the names of the folders at level ``L`` are the
    classes, the files directly inside them the samples, and each sample id is
    the file's path under ``path`` (``"<writer>/<class>/x.png"``); files at the
    levels above are ignored. Samples are ordered by class, then by that path.

    What an operating system writes into a folder by itself (see
    :func:`is_os_metadata`: ``Thumbs.db``, ``desktop.ini``, ``.DS_Store``,
    ``._<name>`` AppleDouble files, a ``__MACOSX`` folder, ...) is skipped, at
    the top level and inside class folders, and listed in
    :attr:`IngestResult.skipped`. Any other file in a class folder is a sample,
    so a stray non-image file fails validation by its path.

    Each file is decoded with Pillow (first frame only; EXIF orientation is not
    applied), converted to ``color_mode`` (alpha is dropped, not composited;
    palette images are expanded), resized to ``image_size`` with :data:`RESAMPLE`
    (bilinear) and stored as uint8 ``(height, width, channels)``. A file that
    cannot be decoded (corrupt, truncated, empty, not an image) does not stop the
    ingest: its row is all zeros, its status ``"unreadable: <reason>"`` and its
    original size ``0 x 0 x 0``.

    Parameters
    ----------
    path : Path
        The data folder (``data.path``).
    out_dir : Path
        Prepared directory to write (replaced atomically); must not be inside
        ``path``.
    image_size : tuple of int
        ``(height, width)`` in pixels after resizing (``data.image_size``).
    color_mode : str, optional
        ``"rgb"`` (3 channels) or ``"grayscale"`` (1 channel, Pillow ``"L"``)
        (``data.color_mode``). Default ``"rgb"``.
    classes : sequence of str, optional
        ``data.classes``: the class folder names in index order; a listed class
        without a folder is a declared class with no samples. Default: the sorted
        folder names.
    class_level : int, optional
        ``data.class_level``: how many folder levels below ``path`` the class
        folders are. Default ``0`` (``path/<class>/<file>``).

    Returns
    -------
    IngestResult
        ``n_problems`` counts the unreadable files; ``skipped`` lists the
        operating-system files and folders skipped (relative to ``path``).

    Raises
    ------
    IngestError
        If ``color_mode`` or ``image_size`` is not allowed; if ``path`` does not
        exist, is not a directory, has no class subfolders or no files in them;
        if a class folder is not in ``classes``; or if ``out_dir`` is inside
        ``path``. An empty class folder is *not* an error:
        it is a declared class with no samples, for validation to report.

    Notes
    -----
    ``samples.parquet`` has ``sample_id`` (``"<class>/<file>"``, or the path
    under ``path`` with ``class_level > 0``), ``label``,
    ``content_hash``, ``status``, ``source`` (the file path, ``path`` joined with
    the sample id, as given) and ``orig_height``, ``orig_width``,
    ``orig_channels`` (from the file's mode before conversion: ``L`` 1, ``LA`` 2,
    ``RGB`` 3, ``RGBA`` 4, palette ``P`` 3). All unreadable rows share the hash of
    an all-zero row.
    """
    started = time.perf_counter()
    height, width = _check_image_size(image_size)
    pil_mode = _check_color_mode(color_mode)
    path, out_dir = Path(path), Path(out_dir)
    listing = _list_image_folder(path, classes, _check_class_level(class_level))
    class_names, files = listing.class_names, listing.files
    _check_out_dir_outside(out_dir, path)
    channels = 3 if pil_mode == "RGB" else 1

    statuses: list[str] = []
    orig: list[tuple[int, int, int]] = []
    with _PreparedWriter(
        out_dir,
        n_samples=len(files),
        input_shape=(height, width, channels),
        dtype=np.uint8,
    ) as writer:
        for file in files:
            decoded = _decode(file.path, mode=pil_mode, size=(height, width))
            writer.append_row(decoded.pixels)
            statuses.append(decoded.status)
            orig.append(decoded.orig_shape)
        return writer.commit(
            samples={
                "sample_id": [f.sample_id for f in files],
                "label": [f.label for f in files],
                "status": statuses,
                "source": [str(f.path) for f in files],
                "orig_height": [o[0] for o in orig],
                "orig_width": [o[1] for o in orig],
                "orig_channels": [o[2] for o in orig],
            },
            source="images",
            class_names=class_names,
            value_range=(0.0, 255.0),
            scale=255.0,
            started=started,
            skipped=listing.skipped,
        )


# ---------------------------------------------------------------- parameters


def _check_color_mode(color_mode: object) -> str:
    if not isinstance(color_mode, str) or color_mode not in COLOR_MODES:
        allowed = ", ".join(sorted(COLOR_MODES))
        raise IngestError(
            f"data.color_mode: unknown {color_mode!r}; allowed: {allowed}"
        )
    return COLOR_MODES[color_mode]


def _check_image_size(image_size: object) -> tuple[int, int]:
    ok = (
        isinstance(image_size, Sequence)
        and not isinstance(image_size, str)
        and len(image_size) == 2
        and all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0
            for v in image_size
        )
    )
    if not ok:
        raise IngestError(
            f"data.image_size: got {image_size!r}; expected [height, width] as two "
            "positive integers (pixels), e.g. [100, 100]"
        )
    height, width = image_size  # type: ignore[misc]
    return int(height), int(width)


def _check_class_level(class_level: object) -> int:
    if (
        isinstance(class_level, bool)
        or not isinstance(class_level, int | np.integer)
        or class_level < 0
    ):
        raise IngestError(
            f"data.class_level: got {class_level!r}; expected an integer >= 0 (the "
            "folder level naming the class: 0 for data.path/<class>/, 1 for "
            "data.path/<group>/<class>/)"
        )
    return int(class_level)


def _check_out_dir_outside(out_dir: Path, path: Path) -> None:
    inside = out_dir.resolve().is_relative_to(path.resolve())
    if inside:
        raise IngestError(
            f"out_dir: {out_dir} is inside data.path {path}; it would be read as a "
            "class folder by the next ingest: write it outside the data folder"
        )


# ---------------------------------------------------------------- listing


def is_os_metadata(entry: Path) -> bool:
    """Whether ``entry`` is a file or folder an operating system made by itself.

    Windows: ``Thumbs.db``, ``ehthumbs.db``, ``desktop.ini``, ``$RECYCLE.BIN``,
    ``System Volume Information``. macOS: ``.DS_Store``, ``._<name>``
    (AppleDouble), ``Icon\\r``, ``.localized``, ``__MACOSX`` (zip archives),
    ``.Spotlight-V100``, ``.Trashes``, ``.fseventsd``, ``.TemporaryItems``. Names
    are compared without regard to case.
    """
    name = entry.name.lower()
    if entry.is_dir():
        return name in _OS_METADATA_DIRS
    return name in _OS_METADATA_FILES or name.startswith(_APPLE_DOUBLE_PREFIX)


def _visible(entry: Path) -> bool:
    return not entry.name.startswith(".")


@dataclass(frozen=True)
class _Listing:
    class_names: list[str]
    files: list[_ImageFile]
    skipped: tuple[str, ...]  # OS metadata, relative to the data folder


def _list_image_folder(
    path: Path, classes: Sequence[str] | None, class_level: int = 0
) -> _Listing:
    """Class names and every sample file, in sorted order; OS metadata skipped."""
    layout = (
        f"expected a folder with one subfolder per class, e.g. {path}/<class>/"
        if class_level == 0
        else f"expected class folders {class_level} level(s) down "
        f"(data.class_level={class_level}), e.g. {path}/"
        + "<group>/" * class_level
        + "<class>/"
    )
    if not path.exists():
        raise IngestError(f"data.path: {path} does not exist; {layout}")
    if not path.is_dir():
        raise IngestError(f"data.path: {path} is not a directory; {layout}")
    skipped: list[str] = []
    # the folders at each level down to the class level, as "a/b/" under path
    parents = [""]
    for _ in range(class_level + 1):
        below: list[str] = []
        for rel in parents:
            for entry in sorted((path / rel).iterdir(), key=lambda e: e.name):
                name = f"{rel}{entry.name}"
                if is_os_metadata(entry):
                    skipped.append(name + ("/" if entry.is_dir() else ""))
                elif _visible(entry) and entry.is_dir():
                    below.append(name + "/")
        parents = below
    class_dirs = [(rel.rstrip("/").rpartition("/")[2], rel) for rel in parents]
    folders = sorted({name for name, _ in class_dirs})
    if not folders:
        what = "class subfolders" if class_level == 0 else "class folders"
        raise IngestError(
            f"data.path: {path} has no {what} (hidden ones and "
            f"operating-system folders such as __MACOSX are ignored); {layout}"
        )
    class_names = _class_order(folders, classes, path)
    label_of = {name: label for label, name in enumerate(class_names)}
    files: list[_ImageFile] = []
    for name, rel in sorted(class_dirs, key=lambda d: (label_of[d[0]], d[1])):
        for entry in sorted((path / rel).iterdir(), key=lambda e: e.name):
            if is_os_metadata(entry):
                skipped.append(f"{rel}{entry.name}" + ("/" if entry.is_dir() else ""))
                continue
            if not (_visible(entry) and entry.is_file()):
                continue
            sample_id = f"{rel}{entry.name}"
            _check_utf8(sample_id, entry)
            files.append(
                _ImageFile(sample_id=sample_id, label=label_of[name], path=entry)
            )
    if not files:
        folders_text = ", ".join(class_names)
        raise IngestError(
            f"data.path: {path} has class folders ({folders_text}) but no files in "
            "them; put the images directly inside each class folder (nested folders "
            "are not read)"
        )
    return _Listing(class_names=class_names, files=files, skipped=tuple(skipped))


def _class_order(
    folders: list[str], classes: Sequence[str] | None, path: Path
) -> list[str]:
    """The folder names in sorted order, or in the order of ``data.classes``."""
    if classes is None:
        return folders
    if (
        isinstance(classes, str)
        or not all(isinstance(c, str) and c for c in classes)
        or len(set(classes)) < len(classes)
    ):
        raise IngestError(
            f"data.classes: got {classes!r}; expected a list of distinct class "
            "folder names (or null for the folder names in sorted order)"
        )
    unknown = [f for f in folders if f not in classes]
    if unknown:
        raise IngestError(
            f"data.classes: {path} has class folders "
            f"{', '.join(map(repr, unknown))} not in data.classes; allowed: "
            f"{', '.join(map(repr, classes))} (add the names to data.classes, move "
            "the folders out of data.path, or set data.classes to null)"
        )
    return list(classes)


def _check_utf8(name: str, entry: Path) -> None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise IngestError(
            f"data.path: file name {str(entry)!r} is not valid UTF-8; rename it "
            "(sample ids are stored as text)"
        ) from None


# ---------------------------------------------------------------- decoding


def _channels(mode: str) -> int:
    """Channels of a Pillow mode as stored in the file (palette counts as RGB)."""
    return _CHANNELS_OF_MODE.get(mode) or Image.getmodebands(mode)


def _decode(file: Path, *, mode: str, size: tuple[int, int]) -> _Decoded:
    """Decode, convert and resize one file; never raises for a bad file."""
    height, width = size
    try:
        if file.stat().st_size == 0:
            return _unreadable("empty file")
        with Image.open(file) as image:
            image.load()
            orig = (image.height, image.width, _channels(image.mode))
            resized = image.convert(mode).resize((width, height), RESAMPLE)
        pixels = np.asarray(resized, dtype=np.uint8)
    except MemoryError:
        raise
    except UnidentifiedImageError:
        return _unreadable("cannot identify image file")
    except Exception as exc:  # any decoder failure is a property of the file
        return _unreadable(_reason(exc, file))
    if pixels.ndim == 2:
        pixels = pixels[:, :, np.newaxis]
    return _Decoded(pixels=pixels, orig_shape=orig, status=STATUS_OK)


def _unreadable(reason: str) -> _Decoded:
    return _Decoded(pixels=None, orig_shape=(0, 0, 0), status=f"unreadable: {reason}")


def _reason(exc: BaseException, file: Path) -> str:
    """A short, path-free, deterministic reason for a decoding failure."""
    text = str(exc)
    for form in (repr(str(file)), str(file)):
        text = text.replace(form, "")
    text = re.sub(r"\s+", " ", text).strip(" :")
    if not text:
        text = type(exc).__name__
    if len(text) > _MAX_REASON:
        text = text[: _MAX_REASON - 3] + "..."
    return text
