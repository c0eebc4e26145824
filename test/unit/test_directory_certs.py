"""DirectoryCerts: a mounted Secret's ``tls.crt`` and ``tls.key`` are loaded when they appear,
re-read when they change (also when the kubelet swaps its ``..data`` symlink), and a bad new
pair leaves the old one in service."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ome.runtime.certs import KeyPair, generate_ca, issue_serving_cert
from ome.runtime.webhookcerts import DirectoryCerts, check_pair
from test.helpers import eventually


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return generate_ca("dir-test-ca")


def serving(ca: KeyPair) -> KeyPair:
    return issue_serving_cert(ca, ["hooks.webhooks.svc"])


def put(path: Path, data: bytes) -> None:
    """Replace a file at once, so the checking thread never reads it half written."""
    path.with_name(path.name + ".tmp").write_bytes(data)
    os.replace(path.with_name(path.name + ".tmp"), path)


def write(directory: Path, pair: KeyPair) -> None:
    # Key first, then the certificate: a reader between the two sees a mismatched pair.
    put(directory / "tls.key", pair.key_pem)
    put(directory / "tls.crt", pair.cert_pem)


@pytest.fixture
def certs(tmp_path: Path) -> Iterator[DirectoryCerts]:
    source = DirectoryCerts(str(tmp_path), check_interval=0.02)
    yield source
    source.stop()


def test_files_present_at_start_are_loaded_at_once(
    tmp_path: Path, certs: DirectoryCerts, ca: KeyPair
) -> None:
    pair = serving(ca)
    write(tmp_path, pair)
    assert certs.ready() == "not started"
    certs.start()
    assert certs.current() == pair
    assert certs.ready() is None


def test_missing_files_are_named_then_loaded_when_they_appear(
    tmp_path: Path, certs: DirectoryCerts, ca: KeyPair
) -> None:
    certs.start()
    assert certs.current() is None
    assert certs.ready() == f"{tmp_path / 'tls.crt'}: No such file or directory"
    pair = serving(ca)
    put(tmp_path / "tls.crt", pair.cert_pem)
    eventually(lambda: certs.ready() == f"{tmp_path / 'tls.key'}: No such file or directory")
    put(tmp_path / "tls.key", pair.key_pem)
    eventually(lambda: certs.current() == pair)
    assert certs.ready() is None


def test_a_changed_pair_replaces_the_old(
    tmp_path: Path, certs: DirectoryCerts, ca: KeyPair
) -> None:
    first, second = serving(ca), serving(ca)
    write(tmp_path, first)
    certs.start()
    assert certs.current() == first
    write(tmp_path, second)
    eventually(lambda: certs.current() == second)


def test_an_invalid_new_pair_keeps_the_old_one_and_is_logged(
    tmp_path: Path, certs: DirectoryCerts, ca: KeyPair, caplog: pytest.LogCaptureFixture
) -> None:
    first = serving(ca)
    write(tmp_path, first)
    certs.start()
    with caplog.at_level(logging.ERROR, logger="ome.runtime.webhookcerts"):
        put(tmp_path / "tls.key", b"-----BEGIN PRIVATE KEY-----\nnope\n")
        eventually(lambda: "the new one is unusable" in caplog.text)
        assert certs.current() == first and certs.ready() is None
        assert "the key is not an unencrypted PEM private key" in caplog.text
        # A key of another certificate: unusable too.
        put(tmp_path / "tls.key", serving(ca).key_pem)
        eventually(lambda: "the key does not belong to the certificate" in caplog.text)
        assert certs.current() == first
        # Files removed: still the old pair.
        os.remove(tmp_path / "tls.crt")
        eventually(lambda: "No such file or directory" in caplog.text)
        assert certs.current() == first
    # Each bad state is logged once, not at every check.
    assert len([r for r in caplog.records if "unusable" in r.getMessage()]) == 3
    second = serving(ca)
    write(tmp_path, second)
    eventually(lambda: certs.current() == second)


def test_an_invalid_pair_at_start_says_why(
    tmp_path: Path, certs: DirectoryCerts, ca: KeyPair
) -> None:
    put(tmp_path / "tls.crt", b"not a certificate")
    put(tmp_path / "tls.key", serving(ca).key_pem)
    certs.start()
    why = certs.ready()
    assert why is not None
    assert why.startswith(f"{tmp_path / 'tls.crt'}: the certificate is not PEM")
    assert certs.current() is None


def test_a_kubelet_symlink_swap_is_seen(tmp_path: Path, ca: KeyPair) -> None:
    """The kubelet's layout: tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>/."""
    first, second = serving(ca), serving(ca)
    for name, pair in (("..v1", first), ("..v2", second)):
        (tmp_path / name).mkdir()
        write(tmp_path / name, pair)
    os.symlink("..v1", tmp_path / "..data")
    for file in ("tls.crt", "tls.key"):
        os.symlink(f"..data/{file}", tmp_path / file)
    certs = DirectoryCerts(str(tmp_path), check_interval=0.02)
    certs.start()
    try:
        assert certs.current() == first
        os.symlink("..v2", tmp_path / "..data_tmp")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")  # atomic, as the kubelet does
        eventually(lambda: certs.current() == second)
    finally:
        certs.stop()


def test_check_pair_accepts_a_chain_and_rejects_strangers(ca: KeyPair) -> None:
    pair = serving(ca)
    assert check_pair(KeyPair(pair.cert_pem + ca.cert_pem, pair.key_pem)) is None
    assert check_pair(KeyPair(ca.cert_pem, pair.key_pem)) == (
        "the key does not belong to the certificate"
    )
    assert check_pair(KeyPair(b"", pair.key_pem)) is not None
