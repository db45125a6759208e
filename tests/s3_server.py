"""A real S3-compatible server for tests: moto's standalone server in its own process on a
free loopback port (moto[server] is a test extra). Clients reach it the way users reach
theirs: through the standard AWS variables (``AWS_ENDPOINT_URL``, keys, region)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher.launch import free_ports


@contextmanager
def s3_server(log_dir: Path) -> Iterator[dict[str, str]]:
    """Start the server; yields the environment that points AWS clients at it."""
    (port,) = free_ports(1)
    exe = Path(sys.executable).with_name("moto_server")
    log = open(log_dir / "moto.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start: {(log_dir / 'moto.log').read_text()}") from None
                time.sleep(0.1)
        yield {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_DEFAULT_REGION": "us-east-1"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextmanager
def aws_env(env: dict[str, str]) -> Iterator[None]:
    """This process's AWS clients talk to the test server for the block (fsspec caches
    filesystem instances, so the cache is cleared on the way in and out)."""
    import fsspec
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        fsspec.filesystem("s3").clear_instance_cache()
        try:
            yield
        finally:
            fsspec.filesystem("s3").clear_instance_cache()


def new_bucket() -> str:
    """Create a bucket on the server the environment names; its name."""
    import fsspec

    name = f"streamrec-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("s3").mkdir(name)
    return name
