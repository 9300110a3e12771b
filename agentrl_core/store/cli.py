"""Registry command line: `python -m agentrl_core.store.cli upgrade|show [--url URL] [--root DIR]`."""

from __future__ import annotations

import argparse
import sys

from agentrl_core.store.errors import RegistryError
from agentrl_core.store.run_registry import Registry, open_registry


def _show(reg: Registry) -> None:
    print(f"registry {reg.url} at revision {reg.revision()}")
    for run in reg.runs():
        checkpoints = reg.checkpoints(run=run.name)
        print(f"  run {run.name!r} [{run.status}] stages={[s.name for s in reg.stages(run.name)]} "
              f"checkpoints={len(checkpoints)} evals={len(reg.evals(run=run.name))}")


def main(argv: list[str] | None = None) -> int:
    """Open (migrating to the newest schema) the registry; `show` also lists its runs."""
    parser = argparse.ArgumentParser(prog="python -m agentrl_core.store.cli", description=__doc__)
    parser.add_argument("command", choices=["upgrade", "show"])
    parser.add_argument("--url", default=None, help="SQLAlchemy URL (default: SQLite at <root>/registry.db)")
    parser.add_argument("--root", default="runs", help="run root holding registry.db when --url is not given")
    args = parser.parse_args(argv)
    try:
        with open_registry(args.url, args.root) as reg:
            if args.command == "upgrade":
                print(f"registry {reg.url} is at revision {reg.revision()}")
            else:
                _show(reg)
    except RegistryError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
