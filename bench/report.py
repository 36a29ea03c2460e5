"""Writes what a run measured: ``benchmarks.json`` (every figure), ``benchmarks.md``
and the PNG plots (``bench/plots.py``); ``python -m bench.report [--out docs]`` writes
the page and the JSON again from the figures stored, without a run. The page is a template
(``bench/templates/benchmarks.md.j2``, one include per section) that reads the figures
as the run recorded them and formats them with the filters below. This module keeps
what is worked out rather than shown: a peer compared at the rates both were tested
at, the step whose CPU is shown, the largest of a set of costs, the goals. A section
the run did not have, or that failed, has no figures and no place on the page."""

from __future__ import annotations

import argparse
import functools
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jinja2

from bench.common import ROOT, cpu_step, fmt, keyed, ratio
from bench.goals import evaluate, sync_calls_of_its_own
from bench.plots import IMG, PHASES, plots


def times(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}×"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def paragraph(text: str) -> str:
    """A paragraph the template wraps for its reader, as the one line the page has."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip()) + "\n"


def pairs(
    items: Mapping[str, Any] | Iterable[tuple[str, Any]], sep: str = " ", spec: str = ""
) -> str:
    """``name value, name value``: a mapping (or its items) on one line, each value
    formatted by ``spec`` as Python's ``format`` does."""
    entries = items.items() if isinstance(items, Mapping) else items
    return ", ".join(f"{k}{sep}{format(v, spec)}" for k, v in entries)


# -- what the page works out ---------------------------------------------------------


def largest(
    costs: Mapping[str, float | None], leave_out: tuple[str, ...] = ()
) -> tuple[str, float] | None:
    """The largest of named costs (the first of equals); unmeasured ones left out."""
    known = {k: v for k, v in costs.items() if v is not None and k not in leave_out}
    return max(known.items(), key=lambda kv: kv[1]) if known else None


def compare_peer(platform: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """Sustainable rates as a ratio, and p99 of each at the rates both were tested at."""
    ours, theirs = keyed(platform.get("steps"), "rate"), keyed(peer.get("steps"), "rate")
    common = sorted(set(ours) & set(theirs))
    rows = [
        {
            "rate": r,
            "platform_p99_ms": ours[r]["p99_ms"],
            "peer_p99_ms": theirs[r]["p99_ms"],
            "p99_ratio": ratio(ours[r]["p99_ms"], theirs[r]["p99_ms"]),
            "platform_sustained": ours[r]["sustained"],
            "peer_sustained": theirs[r]["sustained"],
        }
        for r in common
    ]
    both = [row["rate"] for row in rows if row["platform_sustained"] and row["peer_sustained"]]
    headline = max(both) if both else (common[0] if common else None)
    return {
        "platform_sustainable_rate": platform.get("sustainable_rate"),
        "peer_sustainable_rate": peer.get("sustainable_rate"),
        "rate_ratio": ratio(platform.get("sustainable_rate"), peer.get("sustainable_rate")),
        "common_rates": rows,
        "headline_rate": headline,
        "headline": next((row for row in rows if row["rate"] == headline), None),
    }


def cpu_table(e2e: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any] | None:
    """CPU per request by process: each configuration at its sustainable rate, and
    LitServe also at the platform's; the steps with their labels, and every process."""
    common = cpu_step(e2e.get("batching_on") or {})
    candidates = [
        ("platform, batching on", common),
        ("platform, batching off", cpu_step(e2e.get("batching_off") or {})),
        ("LitServe", cpu_step(peer, common["rate"]) if common else None),
        ("LitServe", cpu_step(peer)),
    ]
    chosen: dict[tuple[str, float], dict[str, Any]] = {}
    for label, x in candidates:
        if x:
            chosen.setdefault((label, x["rate"]), x)
    roles: list[str] = []
    for x in chosen.values():
        roles += [r for r in x["cpu_ms_per_request"] if r not in roles]
    rows = [(label, x) for (label, _), x in chosen.items()]
    return {"roles": roles, "rows": rows} if rows else None


def on_off_at_break(e2e: dict[str, Any]) -> tuple[float, float, float] | None:
    """p99 with batching on and off at the lowest rate that either did not sustain."""
    on = keyed((e2e.get("batching_on") or {}).get("steps"), "rate")
    off = keyed((e2e.get("batching_off") or {}).get("steps"), "rate")
    for rate in sorted(set(on) & set(off)):
        if not (on[rate]["sustained"] and off[rate]["sustained"]):
            return rate, on[rate]["p99_ms"], off[rate]["p99_ms"]
    return None


GENERATION_TARGETS = {
    "bare": "bare transformers",
    "bare_vllm": "bare vLLM",
    "platform": "platform on transformers",
    "platform_vllm": "platform on vLLM",
    "platform_openai": "platform on transformers, OpenAI API",
    "litserve": "LitServe",
}


def generation_levels(g: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target's levels, target by target in the page's order, each with its name."""
    return [
        {**lv, "target": name}
        for key, name in GENERATION_TARGETS.items()
        if key in g["targets"]
        for lv in g["targets"][key]["levels"]
    ]


def cpu_roles(levels: list[dict[str, Any]]) -> list[str]:
    """The processes whose CPU per token any level measured, the load generator last."""
    seen = {r for lv in levels for r in lv.get("cpu_ms_per_token", {})}
    return sorted(seen, key=lambda r: (r == "load generator", r))


def largest_cpu_per_token(platform: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The platform's largest CPU cost per token at its most streams, and its worker's."""
    top = max(platform, key=lambda lv: lv["concurrency"], default={})
    costs = top.get("cpu_ms_per_token", {})
    found = largest(costs)
    if not found:
        return None
    worker = next((v for k, v in costs.items() if k.startswith("worker") and v is not None), None)
    return {"streams": top["concurrency"], "process": found[0], "ms": found[1], "worker": worker}


# -- the page ------------------------------------------------------------------------


@functools.cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("bench", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # markdown, not HTML
    )
    env.filters.update(
        fmt=fmt,
        times=times,
        pct=pct,
        paragraph=paragraph,
        pairs=pairs,
        spec=format,
        json=json.dumps,
    )
    env.globals.update(
        ratio=ratio,
        keyed=keyed,
        largest=largest,
        cpu_step=cpu_step,
        cpu_table=cpu_table,
        on_off_at_break=on_off_at_break,
        sync_calls_of_its_own=sync_calls_of_its_own,
        generation_targets=GENERATION_TARGETS,
        generation_levels=generation_levels,
        cpu_roles=cpu_roles,
        largest_cpu_per_token=largest_cpu_per_token,
        phases=PHASES,
    )
    return env


def render(template: str, **context: Any) -> str:
    """A page of ``bench/templates`` filled in: the benchmarks' or the soak's."""
    return _templates().get_template(template).render(**context)


def markdown(results: dict[str, Any], images: list[str]) -> str:
    """The page: the template filled with the run's figures (a section with none is
    left out); a plot the template has no place for goes at the end."""
    text = render(
        "benchmarks.md.j2",
        results=results,
        sections={name: s for name, s in results["sections"].items() if s},
        goals=evaluate(results),
    )
    for name in images:
        if f"({IMG}/{name})" not in text:
            text += f"![{name}]({IMG}/{name})\n\n"
    return text.rstrip() + "\n"


def clean(value: Any) -> Any:
    """JSON has no NaN: an empty percentile becomes null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def json_document(results: dict[str, Any]) -> dict[str, Any]:
    """``benchmarks.json``: the figures, and the goals as the page judges them (judged
    afresh each time: a merged report's figures may have changed)."""
    return clean({**results, "goals": evaluate(results)})


def write(results: dict[str, Any], out_dir: Path, images: list[str] | None = None) -> list[Path]:
    """The report's files in ``out_dir``; the plots drawn afresh unless ``images``
    names those already there."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = plots(results, out_dir) if images is None else images
    json_path = out_dir / "benchmarks.json"
    json_path.write_text(json.dumps(json_document(results), indent=2, default=str) + "\n")
    md_path = out_dir / "benchmarks.md"
    md_path.write_text(markdown(results, images))
    return [md_path, json_path] + [out_dir / IMG / name for name in images]


def rerender(out_dir: Path) -> list[Path]:
    """``benchmarks.md`` and ``benchmarks.json`` written again from the figures that
    ``benchmarks.json`` stores, without a run: after a change to the templates or the
    goals. The plots already in ``img/`` stay as they are."""
    results = json.loads((out_dir / "benchmarks.json").read_text())
    return write(results, out_dir, sorted(p.name for p in (out_dir / IMG).glob("*.png")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=rerender.__doc__)
    parser.add_argument("--out", default=str(ROOT / "docs"), help="folder of benchmarks.json")
    written = rerender(Path(parser.parse_args(argv).out))
    print("wrote", ", ".join(str(p) for p in written[:2]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
