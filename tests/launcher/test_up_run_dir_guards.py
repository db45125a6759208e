"""What `up` refuses in its run directory before it starts anything: an admin token that is not a
token (random bytes, empty: an empty one would turn the admin API off), a PS secret or admin
token path that is a directory, a run directory another `up` holds (its lock names the owner),
and a taken API port. Each refusal names the file or port; nothing else in the directory changes."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from core.errors import ConfigError, Conflict
from launcher.up import api_port_free
from launcher.up_run_dir import LOCK_FILE, RunLock, admin_token, ps_secret


@pytest.mark.parametrize(("content", "says"), [
    (b"", "is empty, which would turn the admin API off"),
    (b"  \n", "is empty, which would turn the admin API off"),
    (bytes(range(256)), "bytes that are not a token"),
    (b"\xff\xfe\x00token", "bytes that are not a token"),
    (b"two words\n", "bytes that are not a token"),
])
def test_a_kept_admin_token_that_is_not_a_token_is_refused_naming_the_file(tmp_path: Path, content: bytes,
                                                                           says: str) -> None:
    path = tmp_path / "admin-token"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        admin_token(tmp_path)
    assert str(path) in err.value.message and says in err.value.message
    assert path.read_bytes() == content  # left for the user to look at, not replaced


def test_a_kept_admin_token_is_reused_and_a_missing_one_made(tmp_path: Path) -> None:
    made = admin_token(tmp_path)
    assert len(made) >= 24 and admin_token(tmp_path) == made
    (tmp_path / "admin-token").write_text("my-own-token\n")
    assert admin_token(tmp_path) == "my-own-token"


@pytest.mark.parametrize("name", ["ps-secret", "admin-token", ".ps-secret.tmp"])
def test_a_directory_where_a_run_file_belongs_is_refused_naming_it(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    (tmp_path / name / "inside").write_text("kept")
    with pytest.raises(ConfigError) as err:
        admin_token(tmp_path) if name == "admin-token" else ps_secret(tmp_path)
    assert f"{tmp_path / name} is a directory" in err.value.message
    assert (tmp_path / name / "inside").read_text() == "kept"


def test_a_second_lock_on_a_run_directory_is_refused_naming_the_owner_until_released(tmp_path: Path) -> None:
    first = RunLock(tmp_path)
    owner = (tmp_path / LOCK_FILE).read_text()
    assert f"pid {os.getpid()} on {socket.gethostname()}" in owner
    with pytest.raises(Conflict) as err:
        RunLock(tmp_path)  # flock locks are per open file: a second open conflicts in this process too
    assert f"run directory {tmp_path} is in use" in err.value.message
    assert f"pid {os.getpid()} on {socket.gethostname()}" in err.value.message
    assert (tmp_path / LOCK_FILE).read_text() == owner  # the refused one changed nothing
    first.release()
    RunLock(tmp_path).release()


def test_a_taken_api_port_is_refused_before_anything_starts() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(Conflict) as err:
            api_port_free("127.0.0.1", port)
        assert f"port {port} is in use" in err.value.message
    api_port_free("127.0.0.1", port)  # free again once the holder closed it
    api_port_free("127.0.0.1", 0)  # any port
