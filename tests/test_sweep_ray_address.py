"""Where `replay sweep --ray ADDRESS` connects, decided before Ray is asked: Ray's own "auto"
also joins any Ray running on the machine (another sweep's private one, which then took this
sweep down with it), and its connect to an address where nothing listens retries for about
14 minutes. No Ray needed: the address is checked before ray.init."""

from __future__ import annotations

import socket

import pytest

from replay.errors import ConfigError
from replay.sweep import ray_backend
from replay.sweep.config import load_experiment


def _exp(tmp_path, address: str):
    path = tmp_path / "e.toml"
    path.write_text(
        'name = "e"\n[trace]\nsynth = { preset = "swe-agent", tasks = 2 }\n'
        '[run]\npool = 2\n[engine]\nkind = "sim"\ndevice_kv_gib = 1\n'
        f'[cluster]\nbackend = "ray"\naddress = "{address}"\n'
    )
    return load_experiment(path)


@pytest.fixture
def no_cluster_here(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_backend, "_started_cluster", lambda: None)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free again once closed: nothing listens there


def test_auto_with_no_started_cluster_is_refused_not_any_ray_found(tmp_path, no_cluster_here):
    with pytest.raises(
        ConfigError, match="no Ray cluster was started on this machine.*--ray local"
    ):
        ray_backend._address(_exp(tmp_path, "auto"))


def test_auto_takes_ray_address_or_the_started_clusters_address(
    tmp_path, no_cluster_here, monkeypatch
):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        here = f"127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setattr(ray_backend, "_started_cluster", lambda: here)
        assert ray_backend._address(_exp(tmp_path, "auto")) == here
        monkeypatch.setenv("RAY_ADDRESS", here)
        monkeypatch.setattr(ray_backend, "_started_cluster", lambda: "10.9.9.9:1")
        assert ray_backend._address(_exp(tmp_path, "auto")) == here


@pytest.mark.parametrize("address", ["garbage", ":6379", "localhost:99999", "host:port", "h:0"])
def test_a_malformed_address_is_refused(tmp_path, address):
    with pytest.raises(ConfigError, match="expected auto, local, HOST:PORT or ray://HOST:PORT"):
        ray_backend._address(_exp(tmp_path, address))


def test_an_address_where_nothing_listens_is_refused_at_once(tmp_path):
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ConfigError, match="nothing answers"):
        ray_backend._address(_exp(tmp_path, address))


def test_local_and_ray_client_addresses_are_left_to_ray(tmp_path):
    assert ray_backend._address(_exp(tmp_path, "local")) == "local"
    assert ray_backend._address(_exp(tmp_path, "ray://h:10001")) == "ray://h:10001"
