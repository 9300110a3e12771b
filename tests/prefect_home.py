"""A Prefect home whose database is already migrated, for the tests that start Prefect in a process of their own.

A Prefect server on a fresh PREFECT_HOME first migrates an empty SQLite database through every one of Prefect's
schema revisions: about 13 s of CPU (of 21 s to boot on a 2-core Zen 3), paid again by every test that gives a
run its own home. A user pays it once, on the first run; later runs find the database at Prefect's head revision.
So the suite migrates one database per session (`prefect server database upgrade`, shared by the parallel workers
under a file lock) and copies it into each test's home: the later-run case, as a user meets it. The first-run case
(an empty home) stays covered by the tests that do not seed one (test_signals' run that completes by itself).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

DATABASE = "prefect.db"
"""The file name of Prefect's default database in PREFECT_HOME (api.database.connection_url's default)."""


def migrated_database(folder: Path) -> Path:
    """`folder`/prefect.db migrated to Prefect's head revision, made once (the first caller under the lock)."""
    folder.mkdir(parents=True, exist_ok=True)
    database = folder / DATABASE
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "READY").exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
            env.update(PREFECT_HOME=str(folder), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
            out = subprocess.run([str(Path(sys.executable).with_name("prefect")), "server", "database", "upgrade",
                                  "-y"], env=env, capture_output=True, text=True, timeout=600)
            if out.returncode != 0 or not database.exists():
                raise RuntimeError(f"prefect server database upgrade failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
            (folder / "READY").write_text("")
    return database


def seed_home(home: Path, database: Path) -> Path:
    """Make `home` a Prefect home holding a copy of the migrated `database`; return `home`.

    Copied with SQLite's backup API, so the copy is one consistent database whatever journal mode it uses."""
    home.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as source, \
            closing(sqlite3.connect(home / DATABASE)) as copy:
        source.backup(copy)
    return home
