"""A run's older objects out of the cyclic collector's way, and handed back."""

from __future__ import annotations

import gc
import weakref

from fedpipe.model.process import older_objects_frozen


def test_objects_are_frozen_in_the_block_and_collectable_after() -> None:
    class Cycle:
        pass

    before = gc.get_freeze_count()
    a = Cycle()
    a.me = a  # garbage only a cyclic collection frees
    alive = weakref.ref(a)
    with older_objects_frozen():
        assert gc.get_freeze_count() > before
        del a
        gc.collect()
        assert alive() is not None  # a cycle frozen with the rest is left alone
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert alive() is None  # and freed once handed back
