import ringkv


def test_the_package_exports_the_extension():
    assert issubclass(ringkv.Error, RuntimeError)
    assert issubclass(ringkv.ShapeError, ringkv.Error)
    assert issubclass(ringkv.SnapshotError, ringkv.Error)
    assert "scalar" in ringkv.available_isas()
