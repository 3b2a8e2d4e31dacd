"""The two distributions import and agree on nothing more than they must."""

import fems_runtime

import fems2py


def test_versions_are_set():
    assert fems2py.__version__
    assert fems_runtime.__version__
