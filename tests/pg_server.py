"""A throwaway PostgreSQL server for tests and scripts: `start_postgres(tmpdir) -> (url, stop)`.

Uses Debian's PostgreSQL binaries (`/usr/lib/postgresql/<version>/bin`, or `$AGENTRL_PG_BIN`).
initdb refuses to run as root, so under root the cluster is created and run as an unprivileged
user (`postgres`, else `nobody`) in a fresh folder that user owns. The server listens on
127.0.0.1 only, on a free port, with trust authentication (local tests only).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from agentrl_core.web.ports import free_port

PG_ROOT = Path("/usr/lib/postgresql")
SUPERUSER = "agentrl"
DATABASE = "agentrl_test"
_TIMEOUT_S = 60


def find_pg_bin() -> Path | None:
    """Folder holding initdb/pg_ctl/createdb: $AGENTRL_PG_BIN, else the newest Debian version; None if absent."""
    if os.environ.get("AGENTRL_PG_BIN"):
        return Path(os.environ["AGENTRL_PG_BIN"])
    versions = sorted((p for p in PG_ROOT.glob("*/bin") if (p / "initdb").is_file()),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return versions[-1] if versions else None



def _unprivileged_user() -> str | None:
    """None when not root; else a user that may run initdb."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and neither user 'postgres' nor 'nobody' exists: initdb cannot run as root")


def _workdir(tmpdir: Path, user: str | None) -> Path:
    """A folder for the cluster and socket; under root, a /tmp folder owned by `user` (pytest's are 0700 root)."""
    if user is None:
        work = Path(tempfile.mkdtemp(prefix="pg-", dir=tmpdir))
    else:
        work = Path(tempfile.mkdtemp(prefix="agentrl-pg-"))
        entry = pwd.getpwnam(user)
        os.chown(work, entry.pw_uid, entry.pw_gid)
    return work


def _run(cmd: list[str], user: str | None, what: str, log: Path | None = None) -> None:
    full = cmd if user is None else ["runuser", "-u", user, "--", *cmd]
    done = subprocess.run(full, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    if done.returncode != 0:
        detail = log.read_text(errors="replace")[-2000:] if log is not None and log.is_file() else ""
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()}\n{detail}")


def start_postgres(tmpdir: str | Path) -> tuple[str, Callable[[], None]]:
    """Start a fresh PostgreSQL cluster; returns its SQLAlchemy URL (psycopg 3) and a stop function.

    The stop function stops the server (`pg_ctl stop -m fast`) and deletes the cluster; calling it
    twice is harmless.
    """
    bin_dir = find_pg_bin()
    if bin_dir is None:
        raise FileNotFoundError(f"no PostgreSQL binaries under {PG_ROOT}/*/bin (Debian: apt-get install postgresql)")
    user = _unprivileged_user()
    work = _workdir(Path(tmpdir), user)
    data, log, port = work / "data", work / "server.log", free_port()
    stopped = False

    def stop() -> None:
        nonlocal stopped
        if stopped:
            return
        stopped = True
        try:
            if (data / "postmaster.pid").is_file():
                _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], user, "pg_ctl stop", log)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    try:
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-sync"],
             user, "initdb")
        _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", str(_TIMEOUT_S),
              "-o", f"-h 127.0.0.1 -p {port} -k {work} -c fsync=off", "start"], user, "pg_ctl start", log)
        _run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", SUPERUSER, DATABASE],
             user, "createdb")
    except BaseException:
        stop()
        raise
    return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{port}/{DATABASE}", stop


def create_database(url: str) -> str:
    """Create a new empty database on the server of `url`; returns its URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")  # CREATE DATABASE cannot run in a transaction
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)


if __name__ == "__main__":  # a server for manual use: prints its URL, stops on Enter
    url, stop_server = start_postgres(tempfile.gettempdir())
    try:
        input(f"{url}\npress Enter to stop ")
    finally:
        stop_server()
