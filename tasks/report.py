"""The report task: files on disk, then a table, a markdown summary (with the plot) and links in the UI."""

from __future__ import annotations

import base64
from pathlib import Path

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from agentrl_core.evaluation.report import write_report


@task(name="report")
def report(run_dir: str, evals: dict[str, dict], stage_dirs: dict[str, str], exports: dict[str, str]) -> dict:
    """Write the report files and publish them as Prefect artifacts; returns the table rows."""
    rep = write_report(Path(run_dir), evals, {k: Path(v) for k, v in stage_dirs.items()}, extra=exports)
    create_table_artifact(table=rep.rows, key="evaluation", description="Held-out evaluation of each model")
    body = rep.markdown.read_text()
    if rep.plot is not None:
        png = base64.b64encode(rep.plot.read_bytes()).decode()
        body += f"\n## Reward curve\n\n![reward curve](data:image/png;base64,{png})\n\nFile: `{rep.plot}`\n"
    create_markdown_artifact(markdown=body, key="run-summary", description="Run summary")
    for label, path in exports.items():
        where = str(Path(path).resolve())
        create_link_artifact(link=Path(where).as_uri(), link_text=where, key=f"checkpoint-{label}",
                             description=f"{label} checkpoint (Hugging Face folder)")
    return {"rows": rep.rows, "markdown": str(rep.markdown), "plot": str(rep.plot) if rep.plot else None}
