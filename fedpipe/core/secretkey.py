"""The project's secret key: what differential privacy's noise is keyed by.

The key is 32 random bytes from the OS (:func:`secrets.token_bytes`), written at
first use to a file only its owner may read (mode 0600, in a directory of mode
0700), by default ``.fedpipe/dp.key`` (:data:`fedpipe.config.layout.DP_KEY`),
which git and DVC ignore (``.gitignore``, ``.dvcignore``) and no stage reads as
a dependency or writes as an output. Whoever holds the file reproduces a run bit
for bit; whoever has only the versioned and pushed files cannot regenerate the
noise. The key is never printed: errors name the file, not its bytes.

Only the task layer reads the file; the library receives the key as bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from fedpipe.core.errors import FedpipeError
from fedpipe.core.seeds import KEY_BYTES


class SecretKeyError(FedpipeError, ValueError):
    """The key file cannot be used (wrong size, readable by others)."""


def load_or_create_key(path: Path) -> bytes:
    """The key in ``path``, created first (OS entropy, mode 0600) when missing.

    Two processes that create it at once agree: the file is created exclusively
    and the loser reads the winner's.

    Raises
    ------
    SecretKeyError
        The file does not hold :data:`~fedpipe.core.seeds.KEY_BYTES` bytes, or
        its group or others may read or write it.
    """
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise SecretKeyError(
            f"{path}: the secret key of the run's DP noise is readable by others "
            f"(mode {mode:04o}); allowed: 0600 (chmod 600 {path})"
        )
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise SecretKeyError(
            f"{path}: expected a secret key of {KEY_BYTES} bytes, found "
            f"{len(key)}; delete the file to have a new one made (the runs noised "
            "with the old key can then no longer be reproduced)"
        )
    return key


def derived_key(key: bytes, label: str, *coords: int) -> bytes:
    """A key of its own for ``label`` at ``coords`` (HMAC-SHA256 of ``key``): a
    client's local-DP key, which neither the others' keys nor the records give
    away."""
    message = "/".join([label, *(str(int(c)) for c in coords)]).encode()
    return hmac.new(key, message, hashlib.sha256).digest()
