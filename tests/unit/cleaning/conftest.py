"""Fixtures for the cleaning unit tests."""

import pytest


@pytest.fixture
def one_torch_thread():
    """Torch on one thread for the test (2 shared cores: more threads only oversubscribe), restored after."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
