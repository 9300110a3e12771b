"""A real S3-compatible HTTP server for tests: moto's server on 127.0.0.1, one per test session.

Use it with `from tests.s3_fixtures import s3_endpoint  # noqa: F401` in a test module, then
`s3_endpoint.settings` (endpoint and fake credentials for `open_storage`) and
`s3_endpoint.make_bucket("name")`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

REGION = "us-east-1"


def start_moto() -> tuple[str, Callable[[], None]]:
    """Start moto's S3 server in a thread on 127.0.0.1 (a free port): (endpoint_url, stop)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one INFO line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}", server.stop


@dataclass
class S3Endpoint:
    """A running moto server and the (fake) credentials the tests use with it."""

    url: str
    access_key: str
    secret_key: str
    region: str = REGION

    @property
    def settings(self) -> dict[str, Any]:
        """Keyword arguments of `open_storage` for this endpoint."""
        return {
            "endpoint_url": self.url, "region_name": self.region,
            "aws_access_key_id": self.access_key, "aws_secret_access_key": self.secret_key,
        }

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name=self.region,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key)

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` on the server; return it."""
        self.client().create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """moto's S3 server on 127.0.0.1 for the whole session, stopped at the end."""
    pytest.importorskip("moto.server", reason="S3 tests need moto[server]: pip install 'moto[server]'")
    url, stop = start_moto()
    try:
        yield S3Endpoint(url=url, access_key="AKIATESTING" + secrets.token_hex(4).upper(),
                         secret_key="test-secret-" + secrets.token_hex(16))
    finally:
        stop()
