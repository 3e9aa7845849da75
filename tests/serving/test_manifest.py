"""sha256 manifests and path containment (fbrapids.manifest)."""

import os

import pytest

from fbrapids.errors import ManifestError, UnsafeFileError
from fbrapids.manifest import MANIFEST, resolve_inside, verify_manifest, write_manifest


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"abc")
    (tmp_path / "sub" / "b.txt").write_text("hello")
    write_manifest(tmp_path)
    return tmp_path


def test_verify_accepts_the_tree_it_was_written_for(tree):
    assert verify_manifest(tree) == ["a.bin", "sub/b.txt"]


def test_changed_same_size_file_names_the_file(tree):
    (tree / "sub" / "b.txt").write_text("hellp")
    with pytest.raises(ManifestError, match=r"sub/b\.txt: sha256"):
        verify_manifest(tree)


def test_missing_extra_and_absent_manifest(tree):
    (tree / "extra.pt").write_bytes(b"x")
    with pytest.raises(ManifestError, match=r"extra\.pt: not in the manifest"):
        verify_manifest(tree)
    (tree / "extra.pt").unlink()
    (tree / "a.bin").unlink()
    with pytest.raises(ManifestError, match=r"a\.bin: listed in the manifest .* but missing"):
        verify_manifest(tree)
    (tree / MANIFEST).unlink()
    with pytest.raises(ManifestError, match="no manifest"):
        verify_manifest(tree)


def test_symlink_and_escaping_entry_refused(tree, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "w.pt"
    outside.write_bytes(b"x")
    os.symlink(outside, tree / "link.pt")
    with pytest.raises(ManifestError, match="symbolic link"):
        verify_manifest(tree)


def test_resolve_inside(tree):
    assert resolve_inside(tree, "sub/b.txt") == (tree / "sub" / "b.txt").resolve()
    for bad in ("../x", "/etc/passwd", "sub/../../x", "", "."):
        with pytest.raises(UnsafeFileError):
            resolve_inside(tree, bad, what="latest pointer")
    os.symlink("/tmp", tree / "out")
    with pytest.raises(UnsafeFileError, match="leaves"):
        resolve_inside(tree, "out/x")
