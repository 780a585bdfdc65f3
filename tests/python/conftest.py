import numpy as np
import pytest

import ridge


@pytest.fixture(params=ridge.supported_isas())
def isa(request):
    """Runs a test on every instruction-set path this machine supports."""
    ridge.set_isa(request.param)
    yield request.param
    ridge.reset_isa()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
