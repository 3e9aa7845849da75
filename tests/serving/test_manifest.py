"""sha256 manifests and path containment (fbrapids.files.manifest)."""

import os

import pytest

from fbrapids.errors import ManifestError, UnsafeFileError
from fbrapids.files.manifest import MANIFEST, resolve_inside, verify_manifest, write_manifest


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


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io to count bytes read")
@pytest.mark.parametrize("algorithm", ["sha256", "crc32"])
def test_digests_taken_while_writing_spare_the_read_back_and_match_a_reread(tmp_path, algorithm):
    from fbrapids.files.atomic import digests_of_writes, write_atomic
    from fbrapids.files.manifest import new_hasher

    payload = os.urandom(1 << 22)  # 4 MiB
    with digests_of_writes(tmp_path, lambda: new_hasher(algorithm)) as written:
        write_atomic(tmp_path / "big.bin", [payload[: 1 << 21], payload[1 << 21:]])
        (tmp_path / "sub").mkdir()
        write_atomic(tmp_path / "sub" / "x.bin", [b"abc"])
    (tmp_path / "late.bin").write_bytes(b"not written atomically")  # not recorded: hashed from disk
    before = _rchar()
    content = write_manifest(tmp_path, algorithm=algorithm, written=written)
    assert _rchar() - before < len(payload) // 2  # the 4 MiB file was not read back
    assert sorted(content["files"]) == ["big.bin", "late.bin", "sub/x.bin"]
    assert verify_manifest(tmp_path, accept=(algorithm,)) == ["big.bin", "late.bin", "sub/x.bin"]


def test_a_file_changed_after_its_recorded_write_is_hashed_again(tmp_path):
    from fbrapids.files.atomic import digests_of_writes, write_atomic
    from fbrapids.files.manifest import new_hasher

    with digests_of_writes(tmp_path, lambda: new_hasher("crc32")) as written:
        write_atomic(tmp_path / "a.bin", [b"abc"])
    (tmp_path / "a.bin").write_bytes(b"abcd")  # changed behind the recorder's back
    write_manifest(tmp_path, algorithm="crc32", written=written)
    assert verify_manifest(tmp_path, accept=("crc32",)) == ["a.bin"]  # the manifest holds the new bytes' digest


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_hashes_its_writes_with_its_own_thread(tmp_path):
    from fbrapids.files.atomic import digests_of_writes, write_atomic
    from fbrapids.files.manifest import new_hasher

    big = os.urandom(1 << 19)  # large enough for the background hash thread
    with digests_of_writes(tmp_path, lambda: new_hasher("crc32")) as written:
        write_atomic(tmp_path / "parent.bin", [big, big])  # the parent's pool thread now exists
    pid = os.fork()
    if pid == 0:  # child: the parent's thread is not here; a write must not wait for it for ever
        code = 1
        try:
            with digests_of_writes(tmp_path, lambda: new_hasher("crc32")) as mine:
                write_atomic(tmp_path / "child.bin", [big, big])
            code = 0 if mine.current("child.bin") == written.current("parent.bin") else 2
        finally:
            os._exit(code)
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung writing a file")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
