"""The emulation compiles each kernel for this CPU with the HIP backend's clang: without one the
tests here skip, except in CI, which installs clang-19 and must run them."""
import pytest

from kgen.backends import available
from kgen.knobs import knobs


@pytest.fixture(autouse=True)
def _clang():
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no clang for HIP was found")
        pytest.skip("no clang for HIP found")
