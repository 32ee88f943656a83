"""``HomeLayout.ensure``: the folders a new home starts with."""

from noisycal_platform.paths import HomeLayout

#: Every folder below a fresh home after ``ensure`` (files such as the ledger or datasets.json are not created).
FOLDERS = {
    "archive", "archive/annotations", "artifacts", "cache", "correctness", "correctness/audit",
    "correctness/generations", "datasets", "exports", "exports/cleaned_file_lists", "exports/confirmation_queue",
    "exports/recalibrators", "inbox", "inbox/annotations", "inbox/confirmations", "inbox/quarantine", "ledger",
    "models", "references", "reports",
}


def test_ensure_creates_the_folders_and_no_file(tmp_path):
    layout = HomeLayout.at(tmp_path / "home").ensure()
    made = {p.relative_to(layout.home).as_posix() for p in layout.home.rglob("*")}
    assert made == FOLDERS
    assert all((layout.home / f).is_dir() for f in made)
    assert layout.ensure() is layout and {p.relative_to(layout.home).as_posix() for p in layout.home.rglob("*")} == made
