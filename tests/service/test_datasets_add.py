"""``noisycal datasets add`` checks the folder before registering it: one summary line, never file content."""

import json
import os

import numpy as np
from PIL import Image

from noisycal_platform.dataset_scan import scan_dataset_folder
from orchestration import cli


def _images(folder, n):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(np.full((4, 4, 3), i, dtype=np.uint8)).save(folder / f"img{i}.png")


def test_a_clean_folder_is_registered_with_its_image_count(layout, tmp_path, capsys):
    _images(tmp_path / "ds" / "benign", 3)
    link = tmp_path / "ds-link"
    link.symlink_to(tmp_path / "ds")  # the dataset path itself may be a symlink: its target is registered
    assert cli.main(["--home", str(layout.home), "datasets", "add", "derm", str(link)]) == 0
    assert "(3 images" in capsys.readouterr().out
    assert json.loads(layout.dataset_registry.read_text()) == {"derm": str((tmp_path / "ds").resolve())}


def test_out_of_root_symlinks_unreadable_and_special_files_are_counted_in_one_line(layout, tmp_path, capsys):
    root = tmp_path / "ds"
    _images(root, 2)
    secret = tmp_path / "secret.png"
    secret.write_text("root:$6$do-not-print")
    for i in range(5):
        (root / f"leak{i}.png").symlink_to(secret)
    (root / "inside.png").symlink_to(root / "img0.png")  # stays inside: followed
    os.mkfifo(root / "pipe.png")
    scan = scan_dataset_folder(root)
    assert (scan.images, len(scan.out_of_root), len(scan.special)) == (3, 5, 1)

    assert cli.main(["--home", str(layout.home), "datasets", "add", "derm", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("not registered: ") and "5 symlink(s) pointing outside the folder" in err
    assert "1 special file(s) (pipe.png)" in err and "leak0.png, leak1.png, leak2.png, ..." in err
    assert "do-not-print" not in err and len(err.splitlines()) == 2
    assert not layout.dataset_registry.exists()


def test_a_folder_without_images_is_refused(layout, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["--home", str(layout.home), "datasets", "add", "x", str(tmp_path / "empty")]) == 2
    assert "0 readable image(s)" in capsys.readouterr().err
