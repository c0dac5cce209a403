"""prepare_data's entry point: present files are used as they are, missing ones fetched."""

import json

import pytest

from ddpbench import prepare


@pytest.mark.parametrize("dataset", prepare.DATASETS)
def test_present_files_are_not_downloaded(tmp_path, monkeypatch, dataset):
    for path in prepare.expected_files(dataset, tmp_path / "data"):
        if path.suffix or dataset != "imagenette":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"tiny fake file")
        else:
            path.mkdir(parents=True)
    monkeypatch.setattr(prepare, "download", lambda *a: pytest.fail("downloaded although present"))
    marker = tmp_path / "marker.json"
    assert prepare.main(["--dataset", dataset, "--root", str(tmp_path / "data"), "--marker", str(marker)]) == 0
    info = json.loads(marker.read_text())
    assert info["dataset"] == dataset and info["downloaded"] is False


def test_missing_files_are_downloaded_once(tmp_path, monkeypatch):
    calls = []

    def fake_download(dataset, root, image_size):
        calls.append(dataset)
        for path in prepare.expected_files(dataset, root, image_size):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")

    monkeypatch.setattr(prepare, "download", fake_download)
    assert prepare.prepare("mnist", tmp_path)["downloaded"] is True
    assert prepare.prepare("mnist", tmp_path)["downloaded"] is False
    assert calls == ["mnist"]


def test_failed_download_exits_nonzero_with_reason(tmp_path, monkeypatch, capsys):
    def offline(*args):
        raise OSError("network unreachable")

    monkeypatch.setattr(prepare, "download", offline)
    assert prepare.main(["--dataset", "cifar10", "--root", str(tmp_path)]) == 1
    assert "network unreachable" in capsys.readouterr().err


def test_imagenette_variant_follows_image_size(tmp_path):
    assert prepare.imagenette_variant(128) == "160px"
    assert prepare.imagenette_variant(224) == "320px"
    assert prepare.imagenette_variant(400) == "full"
    assert prepare.expected_files("imagenette", tmp_path, 224)[0].parent.name == "imagenette2-320"
