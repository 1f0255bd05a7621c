"""Sealed reasoning: AES-GCM values that open only under our keys, for their purpose, unchanged."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from server.history.sealing import KEY_FILE, PREFIX, SealError, Sealer, sealer_from

PAYLOAD = {"text": "The user wants the weather; call the tool first."}


def _flip_byte(value: str, at: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(value[len(PREFIX):]))
    raw[at] ^= 0x01
    return PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode()


def test_a_sealed_value_opens_and_hides_its_text() -> None:
    sealer = Sealer.ephemeral()
    sealed = sealer.seal("reasoning", PAYLOAD)
    assert sealed.startswith(PREFIX) and "weather" not in sealed
    assert "weather" not in base64.urlsafe_b64decode(sealed[len(PREFIX):]).decode("latin-1")
    assert sealer.open("reasoning", sealed) == PAYLOAD
    assert sealer.seal("reasoning", PAYLOAD) != sealed  # a fresh nonce each time


TAMPERED = [
    ("a flipped ciphertext byte", lambda s, v: _flip_byte(v, 30)),
    ("a flipped nonce byte", lambda s, v: _flip_byte(v, 5)),
    ("a flipped key-id byte", lambda s, v: _flip_byte(v, 0)),
    ("truncated", lambda s, v: v[:-6]),
    ("cut to the prefix", lambda s, v: PREFIX),
    ("not base64", lambda s, v: PREFIX + "!!!"),
    ("no prefix", lambda s, v: v[len(PREFIX):]),
    ("plain base64 of the text", lambda s, v: PREFIX + base64.urlsafe_b64encode(b'{"text": "x"}').decode()),
    ("sealed under another key", lambda s, v: Sealer.ephemeral().seal("reasoning", PAYLOAD)),
    ("sealed for another purpose", lambda s, v: s.seal("compaction", PAYLOAD)),
]


@pytest.mark.parametrize("tamper", [c[1] for c in TAMPERED], ids=[c[0] for c in TAMPERED])
def test_a_changed_or_foreign_value_does_not_open(tamper) -> None:  # type: ignore[no-untyped-def]
    sealer = Sealer.ephemeral()
    with pytest.raises(SealError):
        sealer.open("reasoning", tamper(sealer, sealer.seal("reasoning", PAYLOAD)))


def test_keys_rotate_the_first_seals_all_open() -> None:
    old = sealer_from("old-secret", Path("/nonexistent"))
    rotated = sealer_from("new-secret,old-secret", Path("/nonexistent"))
    sealed_before = old.seal("reasoning", PAYLOAD)
    assert rotated.open("reasoning", sealed_before) == PAYLOAD
    with pytest.raises(SealError):
        old.open("reasoning", rotated.seal("reasoning", PAYLOAD))


def test_the_key_file_is_made_once_and_kept(tmp_path: Path) -> None:
    first = sealer_from(None, tmp_path)
    sealed = first.seal("reasoning", PAYLOAD)
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert sealer_from(None, tmp_path).open("reasoning", sealed) == PAYLOAD  # as after a restart


def test_a_key_setting_with_no_secret_fails_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        sealer_from(" , ", tmp_path)
