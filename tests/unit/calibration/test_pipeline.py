"""`pipeline` is the one import the assets use: it re-exports every table helper."""

from noisycal_platform.calibration import pipeline, recalibration_tables, tables


def test_pipeline_reexports_the_table_helpers():
    assert set(pipeline.__all__) == set(tables.__all__) | set(recalibration_tables.__all__)
    for name in pipeline.__all__:
        assert callable(getattr(pipeline, name)) or isinstance(getattr(pipeline, name), type)
