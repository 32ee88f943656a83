"""``assets._shell.failing_on``: a bad input fails its step once, naming the file; other errors pass through."""

import dagster as dg
import pytest

from assets._shell import failing_on
from noisycal_platform.io import InputError


def test_input_error_fails_the_step_without_retry_and_names_the_file(tmp_path):
    path = tmp_path / "predictions.csv"
    with pytest.raises(dg.Failure) as caught, failing_on(InputError, file=path):
        raise InputError(path.name, "score must lie in [0, 1]", row=3, column="score", detail="got 1.5")
    assert caught.value.allow_retries is False
    assert caught.value.description == "predictions.csv: row 3, column 'score': score must lie in [0, 1] (got 1.5)"
    assert caught.value.metadata["file"] == dg.MetadataValue.text(str(path))


def test_safe_form_quotes_no_content_and_other_errors_pass_through():
    with pytest.raises(dg.Failure) as caught, failing_on(InputError, safe=True):
        raise InputError("labels.csv", "label must be 0 or 1", row=2, column="label", detail="got 'secret'")
    assert caught.value.description == "labels.csv: row 2, column 'label': label must be 0 or 1"
    assert not caught.value.metadata
    with pytest.raises(KeyError), failing_on(InputError):
        raise KeyError("not an input error")


def test_a_step_reading_several_files_names_the_one_at_fault():
    with pytest.raises(dg.Failure) as caught, failing_on(InputError, file="predictions.csv", file_of_error=True):
        raise InputError("items.csv", "duplicate item_id", row=4, column="item_id")
    assert caught.value.metadata["file"] == dg.MetadataValue.text("items.csv")
