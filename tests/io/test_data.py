"""Private folder discovery and decoding (ldpclient.io.folders), on small synthetic images."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ldpclient.io.folders import (
    DataError,
    ImageDecodeError,
    check_private_folder,
    decode_image,
    discover_images,
    load_private_folder,
    to_uint8_image,
)


def _png(path: Path, arr: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


def _grey(value: int, size: int = 8) -> np.ndarray:
    return np.full((size, size), value, dtype=np.uint8)


def test_discovery_is_recursive_sorted_and_lists_non_images(tmp_path: Path) -> None:
    _png(tmp_path / "b" / "z.png", _grey(10))
    _png(tmp_path / "a.PNG", _grey(20))
    _png(tmp_path / "b" / "a.png", _grey(30))
    Image.fromarray(_grey(40)).save(tmp_path / "c.jpg")
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / ".DS_Store").write_bytes(b"x")
    (tmp_path / "zero.png").write_bytes(b"")
    found = discover_images(tmp_path)
    assert found.files == ("a.PNG", "b/a.png", "b/z.png", "c.jpg")
    reasons = {s.path: s.reason for s in found.skipped}
    assert reasons["notes.txt"].startswith("not an image file extension")
    assert reasons[".DS_Store"] == "hidden file"
    assert reasons["zero.png"] == "empty file (0 bytes)"


def test_a_limited_discovery_stops_at_the_first_images_and_the_folder_check_uses_it(tmp_path: Path) -> None:
    for d in ("a", "b", "c"):
        for k in range(3):
            _png(tmp_path / d / f"{k}.png", _grey(k))
    (tmp_path / "b" / "notes.txt").write_text("x")
    assert len(discover_images(tmp_path).files) == 9
    assert len(discover_images(tmp_path, limit=1).files) == 1
    assert len(discover_images(tmp_path, limit=4).files) == 4
    with pytest.raises(ValueError, match="limit must be >= 1"):  # 0 would read as "no image files"
        discover_images(tmp_path, limit=0)
    check_private_folder(tmp_path)  # passes on the first image file found
    only_hidden = tmp_path / "hidden"
    (only_hidden / ".cache").mkdir(parents=True)
    _png(only_hidden / ".cache" / "x.png", _grey(1))
    _png(only_hidden / ".y.png", _grey(1))
    (only_hidden / "empty.png").write_bytes(b"")
    with pytest.raises(DataError, match="contains no image files"):  # the whole tree is searched first
        check_private_folder(only_hidden)
    nested = tmp_path / "nested"
    _png(nested / "deep" / "er" / "z.png", _grey(2))
    (nested / "skip.txt").write_text("x")
    check_private_folder(nested)


def test_class_folders_are_ignored_and_order_does_not_depend_on_creation(tmp_path: Path) -> None:
    for name in ["cat/2.png", "dog/1.png", "cat/1.png"]:
        _png(tmp_path / name, _grey(5))
    first = load_private_folder(tmp_path, (1, 8, 8))
    assert first.paths == ("cat/1.png", "cat/2.png", "dog/1.png")
    # the result carries no label derived from the directory names
    assert not hasattr(first, "labels")


def test_decoding_resizes_converts_and_scales_to_unit_range(tmp_path: Path) -> None:
    rgb = np.zeros((16, 12, 3), dtype=np.uint8)
    rgb[..., 0] = 255  # pure red
    _png(tmp_path / "red.png", rgb)
    grey = decode_image(tmp_path / "red.png", (1, 8, 8))
    assert grey.shape == (1, 8, 8) and grey.dtype == torch.float32
    # ITU-R 601-2 luma of pure red: 299/1000
    assert torch.allclose(grey, torch.full_like(grey, 0.299), atol=2 / 255)
    colour = decode_image(tmp_path / "red.png", (3, 4, 5))
    assert colour.shape == (3, 4, 5)
    assert torch.allclose(colour[0], torch.ones(4, 5)) and colour[1:].abs().max() == 0
    _png(tmp_path / "g.png", _grey(255, 4))
    assert torch.equal(decode_image(tmp_path / "g.png", (3, 4, 4)), torch.ones(3, 4, 4))
    assert float(decode_image(tmp_path / "g.png", (1, 4, 4)).min()) >= 0.0


def test_sixteen_bit_and_alpha_images(tmp_path: Path) -> None:
    arr16 = np.full((4, 4), 65535 // 2, dtype=np.uint16)
    Image.fromarray(arr16).save(tmp_path / "deep.png")
    out = decode_image(tmp_path / "deep.png", (1, 4, 4))
    assert torch.allclose(out, torch.full((1, 4, 4), 0.5), atol=1e-3)
    rgba = np.zeros((4, 4, 4), dtype=np.uint8)
    rgba[..., 1] = 255
    rgba[..., 3] = 128
    _png(tmp_path / "alpha.png", rgba)
    out = decode_image(tmp_path / "alpha.png", (3, 4, 4))
    assert out.shape == (3, 4, 4) and float(out[1].min()) > 0.9


def test_bad_files_are_skipped_with_reasons(tmp_path: Path) -> None:
    _png(tmp_path / "good.png", _grey(100))
    (tmp_path / "fake.png").write_bytes(b"this is not a png at all")
    big = tmp_path / "trunc.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (24, 24), dtype=np.uint8)).save(big)
    data = big.read_bytes()
    big.write_bytes(data[: len(data) // 2])
    _png(tmp_path / "huge.png", _grey(0, 64))
    result = load_private_folder(tmp_path, (1, 8, 8), max_pixels=32 * 32)
    assert result.paths == ("good.png",)
    assert result.records.shape == (1, 1, 8, 8)
    reasons = {s.path: s.reason for s in result.skipped}
    assert set(reasons) == {"fake.png", "trunc.png", "huge.png"}
    assert "unknown format" in reasons["fake.png"]
    assert reasons["trunc.png"].startswith("cannot decode image")
    assert "too many pixels" in reasons["huge.png"]


def test_pillow_decompression_bomb_guard_is_a_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _png(tmp_path / "bomb.png", _grey(0, 40))
    # Pillow warns above MAX_IMAGE_PIXELS and errors above twice that; both become a skip.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(ImageDecodeError, match="decompression bomb"):
        decode_image(tmp_path / "bomb.png", (1, 8, 8))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(ImageDecodeError, match="decompression bomb"):
        decode_image(tmp_path / "bomb.png", (1, 8, 8))


@pytest.mark.skipif(os.name == "nt", reason="symlinks need privileges on Windows")
def test_symlinks_leaving_the_folder_are_skipped(tmp_path: Path) -> None:
    inside = tmp_path / "private"
    outside = tmp_path / "elsewhere"
    _png(inside / "a.png", _grey(1))
    _png(outside / "secret.png", _grey(2))
    (inside / "link_out.png").symlink_to(outside / "secret.png")
    (inside / "link_in.png").symlink_to(inside / "a.png")
    (inside / "dir_out").symlink_to(outside, target_is_directory=True)
    (inside / "broken.png").symlink_to(tmp_path / "missing.png")
    found = discover_images(inside)
    assert found.files == ("a.png", "link_in.png")
    reasons = {s.path: s.reason for s in found.skipped}
    assert reasons["link_out.png"] == "symlink leaves the folder"
    assert reasons["dir_out/"] == "symlink leaves the folder"
    assert reasons["broken.png"] == "broken symlink"


def test_missing_empty_and_unreadable_folders_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist") as info:
        load_private_folder(tmp_path / "nope", (1, 8, 8))
    assert "\n" not in str(info.value)
    (tmp_path / "file.png").write_bytes(b"x")
    with pytest.raises(DataError, match="not a directory"):
        load_private_folder(tmp_path / "file.png", (1, 8, 8))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "readme.txt").write_text("no images here")
    with pytest.raises(DataError, match="contains no image files"):
        load_private_folder(empty, (1, 8, 8))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.png").write_bytes(b"garbage")
    with pytest.raises(DataError, match="no readable image") as info:
        load_private_folder(broken, (1, 8, 8))
    assert "x.png" in str(info.value) and "\n" not in str(info.value)


def test_bad_input_shape_is_rejected(tmp_path: Path) -> None:
    _png(tmp_path / "a.png", _grey(1))
    with pytest.raises(ValueError, match="input shape"):
        load_private_folder(tmp_path, (2, 8, 8))
    with pytest.raises(ValueError, match="input shape"):
        decode_image(tmp_path / "a.png", (8, 8))


def test_gif_first_frame_and_other_formats(tmp_path: Path) -> None:
    frames = [Image.fromarray(_grey(v)) for v in (200, 10)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:])
    Image.fromarray(_grey(60)).save(tmp_path / "a.bmp")
    Image.fromarray(_grey(60)).save(tmp_path / "a.tiff")
    Image.fromarray(_grey(60)).save(tmp_path / "a.webp", lossless=True)
    result = load_private_folder(tmp_path, (1, 8, 8))
    assert result.paths == ("a.bmp", "a.tiff", "a.webp", "anim.gif")
    assert torch.allclose(result.records[3], torch.full((1, 8, 8), 200 / 255), atol=2 / 255)
    assert torch.allclose(result.records[:3], torch.full((3, 1, 8, 8), 60 / 255), atol=1 / 255)


def test_progress_callback_and_uint8_round_trip(tmp_path: Path) -> None:
    for k in range(3):
        _png(tmp_path / f"{k}.png", _grey(17 * k))
    calls: list[tuple[int, int]] = []
    result = load_private_folder(tmp_path, (1, 8, 8), progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    img = to_uint8_image(result.records[2])
    assert img.mode == "L" and np.asarray(img).max() == 34
    noisy = torch.tensor([[[-0.5, 1.7]]])  # outside [0, 1]: clipped when written
    assert np.asarray(to_uint8_image(noisy)).tolist() == [[0, 255]]
    with pytest.raises(ValueError):
        to_uint8_image(torch.zeros(2, 4, 4))


def test_a_fifo_in_place_of_an_image_never_blocks(tmp_path: Path) -> None:
    """A file swapped for a FIFO between discovery and decoding blocked open() forever."""
    import os
    import threading

    from ldpclient.io.folders import ImageDecodeError, read_image_file

    fifo = tmp_path / "img.png"
    os.mkfifo(fifo)
    outcome: list[str] = []

    def read() -> None:
        try:
            read_image_file(fifo)
        except ImageDecodeError as exc:
            outcome.append(exc.reason)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive() and outcome and "not a regular file" in outcome[0]


def test_an_oversized_file_is_skipped_with_a_reason(tmp_path: Path) -> None:
    from ldpclient.io.folders import ImageDecodeError, read_image_file

    big = tmp_path / "big.png"
    big.write_bytes(b"\0" * 2048)
    with pytest.raises(ImageDecodeError, match="too large"):
        read_image_file(big, max_bytes=1024)


def test_a_symlink_loop_is_named_as_such(tmp_path: Path) -> None:
    from ldpclient.io.folders import discover_images

    folder = tmp_path / "f"
    folder.mkdir()
    Image.fromarray(np.zeros((4, 4), dtype=np.uint8)).save(folder / "ok.png")
    os.symlink(folder / "loop.png", folder / "loop.png")
    os.symlink(folder / "missing.png", folder / "dangling.png")
    reasons = {s.path: s.reason for s in discover_images(folder).skipped}
    assert reasons == {"loop.png": "symlink loop", "dangling.png": "broken symlink"}


def test_file_names_with_escape_sequences_never_reach_the_terminal_raw(tmp_path: Path) -> None:
    """Local file names with ESC showed raw in the noise summary."""
    from typer.testing import CliRunner

    from ldpclient.cli.commands import app

    folder = tmp_path / "f"
    folder.mkdir()
    for name in ("a\x1b[2Jb.png", "=cmd.png", "plain.png"):
        Image.fromarray(np.full((8, 8), 90, dtype=np.uint8)).save(folder / name)
    (folder / "bad\x1b]0;x\x07.png").write_bytes(b"not an image")
    result = CliRunner().invoke(app, ["noise", str(folder), "--out", str(tmp_path / "out"), "--size", "8",
                                      "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "\\x1b" in result.output


def test_eight_bit_images_decode_to_exactly_their_value_over_255(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    grey = rng.integers(0, 256, (9, 7), dtype=np.uint8)
    rgb = rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)
    got_grey = decode_image(_png(tmp_path / "g.png", grey), (1, 9, 7))
    got_rgb = decode_image(_png(tmp_path / "c.png", rgb), (3, 9, 7))
    assert got_grey.dtype == torch.float32 and got_grey.is_contiguous() and got_rgb.is_contiguous()
    assert torch.equal(got_grey, torch.from_numpy(grey.astype(np.float32) / np.float32(255))[None])
    assert torch.equal(got_rgb, torch.from_numpy(rgb.astype(np.float32) / np.float32(255)).permute(2, 0, 1))
    resized = decode_image(tmp_path / "g.png", (1, 18, 14))  # another size: resized in float, still in [0, 1]
    assert resized.shape == (1, 18, 14) and float(resized.min()) >= 0.0 and float(resized.max()) <= 1.0


def test_a_file_is_read_whole_even_when_it_grew_after_it_was_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ldpclient.io.decoding import read_image_file

    data = np.random.default_rng(5).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    path = tmp_path / "grows.png"
    path.write_bytes(data)
    assert read_image_file(path) == data  # larger than one read block
    real_fstat = os.fstat

    def stale_fstat(fd: int) -> os.stat_result:  # the size as it was before the file grew
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 10,
                               st.st_atime, st.st_mtime, st.st_ctime))

    monkeypatch.setattr(os, "fstat", stale_fstat)
    assert read_image_file(path) == data
    with pytest.raises(ImageDecodeError, match="too large"):
        read_image_file(path, max_bytes=100_000)
