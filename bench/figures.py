"""The documentation's figures, drawn by the HTML report's own code (imagesmith.report.svg: one drawing code).

* The benchmark charts, from the committed results in bench/results/: `make docs` draws them on every build
  (scripts/mkdocs_hooks.py adds them to the site as assets/bench/*.svg; nothing is written into docs/).
* The pipeline diagram, docs/assets/pipeline.svg: committed, because the README shows it where no build runs
  (GitHub, GitLab); tests/unit/project/test_docs_figures.py fails when the committed file is not what this draws.

    python3 bench/figures.py --out DIR     # every benchmark chart into DIR (to look at them without mkdocs)
    python3 bench/figures.py --pipeline    # rewrite docs/assets/pipeline.svg after changing PIPELINE below
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from imagesmith.report import load
from imagesmith.report.chartdata import leak_curves, throughputs
from imagesmith.report.svg import PALETTE, STATUS_COLOUR, Bar, esc, hbars, leak_chart, percent_bars, standalone, throughput_chart

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PIPELINE_SVG = ROOT / "docs" / "assets" / "pipeline.svg"
GREY = PALETTE[7]


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


# -- the benchmark charts ---------------------------------------------------------------------------------------


def throughput_h200(results: Path) -> str:
    """bench/results/h200-standard.json: every rate check of the payload on one H200, % of its reference figure."""
    run = load(results / "h200-standard.json")
    v = run.targets[0].verify
    assert v is not None
    return throughput_chart(throughputs(v), v.gpu_name,
                            "imagesmith verify --local --tier standard on 1 × H200: each rate, % of its reference (dashed: fail line)")


def leak(results: Path, name: str, check: str) -> str:
    """A leak check's samples and the payload's fitted line, as the HTML report draws them."""
    v = load(results / name).targets[0].verify
    assert v is not None
    (curve,) = [c for c in leak_curves(v) if c.check.id == check]
    return leak_chart(curve)


def build_times(results: Path) -> str:
    """bench/results/build-local.json: each build of examples/local.yaml, ours against a naive Dockerfile."""
    rows = read(results / "build-local.json")["rows"]
    bars = [Bar(r["run"], r["seconds"], GREY if r["run"].startswith("naive") else PALETTE[0],
                f"{r['seconds']:g} s · {r['built']} of {r['targets']} built" if r["seconds"] else f"< 0.05 s · {r['built']} of {r['targets']} built")
            for r in rows]
    return hbars("make bench: building examples/local.yaml on 2 cores, against a naive single-stage Dockerfile (grey)",
                 bars, max(r["seconds"] for r in rows) * 1.05, "seconds")


def cuda_layer(results: Path) -> str:
    """bench/results/cuda-layer-local.json: the shared CUDA layer against one copy per cell, as % of the latter."""
    shared, today = (read(results / "cuda-layer-local.json")["layouts"][k] for k in ("shared", "today"))
    second = "2.14.1-cu130-py3.13-debian13-base"
    figures: list[tuple[str, Callable[[dict[str, Any]], float], Callable[[float], str]]] = [
        ("registry bytes", lambda x: x["registry_bytes"], lambda n: f"{n / 1e9:.2f} GB"),
        ("second CUDA cell pushed", lambda x: x["pushes"][second]["pushed_bytes"], lambda n: f"{n / 1e9:.2f} GB"),
        ("sibling cell pulled", lambda x: x["pull_sibling"]["pulled_bytes"], lambda n: f"{n / 1e9:.2f} GB"),
        ("sibling pull, seconds", lambda x: x["pull_sibling"]["seconds"], lambda n: f"{n:g} s"),
        ("push of the release, seconds", lambda x: x["push_seconds"], lambda n: f"{n:g} s"),
        ("cold build, seconds", lambda x: x["cold_seconds"], lambda n: f"{n:g} s"),
    ]
    bars = []
    for label, get, fmt in figures:
        pct = 100 * get(shared) / get(today)
        bars.append(Bar(label, pct, STATUS_COLOUR["pass" if pct <= 100 else "warn"], f"{fmt(get(shared))} · {pct:.0f}%",
                        f"{label}: shared {fmt(get(shared))}, one copy per cell {fmt(get(today))}"))
    return percent_bars("the shared CUDA layer, as % of one copy per cell (make release of examples/local.yaml)", bars,
                        reference="one copy per cell")


def render_7400(results: Path) -> str:
    """bench/results/render-7400*.json: each stage's wall seconds for 7,400 targets, before and after the hardening."""
    before, now = read(results / "render-7400-before.json")["wall_s"], read(results / "render-7400.json")["wall_s"]
    bars = []
    for stage in now:
        label = stage.replace("imagesmith render (whole command)", "the whole command")
        bars.append(Bar(f"{label}, before", before[stage], GREY, f"{before[stage]:.2f} s"))
        bars.append(Bar(f"{label}, now", now[stage], PALETTE[0], f"{now[stage]:.2f} s"))
    return hbars("bench/render.py: 7,400 targets, wall seconds per stage, before (grey) and now", bars,
                 max(before.values()) * 1.05, "seconds")


def bench_charts(results: Path = RESULTS) -> dict[str, str]:
    """Every benchmark chart, file name -> a standalone SVG document."""
    charts = {
        "verify-h200-throughput.svg": throughput_h200(results),
        "leak-clean.svg": leak(results / "h200-gpu-evidence", "gpu-clean-1.json", "leak.device"),
        "leak-injected.svg": leak(results / "h200-gpu-evidence", "gpu-leak-0.05.json", "leak.device"),
        "build-times.svg": build_times(results),
        "cuda-layer.svg": cuda_layer(results),
        "render-7400.svg": render_7400(results),
    }
    return {name: standalone(chart) for name, chart in charts.items()}


# -- the pipeline diagram ---------------------------------------------------------------------------------------

# stage, what it does, the artifact it writes; two rows of four, read left to right
PIPELINE = (
    ("matrix.yaml", "torch × CUDA × Python × OS", "your input"),
    ("validate", "every value checked against the knowledge base", "errors with file:line"),
    ("plan", "cell × layer: base → cv / nlp → project", "plan.json"),
    ("render", "one pinned Dockerfile per target", "build/<target>/"),
    ("build", "parallel, cached, one shared CUDA layer", "build.json"),
    ("verify", "the payload inside each image, on a GPU", "verify.json"),
    ("publish", "tags only for what passed", "release.json"),
    ("evidence", "SBOM, attestation, signatures", "attached to each digest"),
)
BOX_W, BOX_H, GAP, PER_ROW, ROW_H, PAD = 168, 84, 24, 4, 128, 12


def pipeline_svg() -> str:
    """The pipeline as boxes and arrows, eight stages in two rows (768 px wide: a README and a docs column show it whole)."""
    width = PAD * 2 + PER_ROW * BOX_W + (PER_ROW - 1) * GAP
    height = PAD * 2 + 2 * ROW_H - (ROW_H - BOX_H) + 8
    parts = []
    for i, (name, what, artifact) in enumerate(PIPELINE):
        row, col = divmod(i, PER_ROW)
        x, y = PAD + col * (BOX_W + GAP), PAD + row * ROW_H
        first = i == 0
        parts.append(f'<rect class="{"input" if first else "stage"}" x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8"/>'
                     f'<text class="name" x="{x + BOX_W / 2}" y="{y + 24}">{esc(name)}</text>'
                     + _lines(what, x + BOX_W / 2, y + 44)
                     + f'<text class="artifact" x="{x + BOX_W / 2}" y="{y + BOX_H - 10}">{esc(artifact)}</text>')
        if col < PER_ROW - 1 and i < len(PIPELINE) - 1:
            parts.append(_arrow(x + BOX_W + 2, y + BOX_H / 2, x + BOX_W + GAP - 2, y + BOX_H / 2))
    last_x, first_x = PAD + (PER_ROW - 1) * (BOX_W + GAP) + BOX_W / 2, PAD + BOX_W / 2
    turn = PAD + BOX_H + (ROW_H - BOX_H) / 2
    parts.append(f'<path class="flow" d="M{last_x} {PAD + BOX_H + 2} V{turn} H{first_x} V{PAD + ROW_H - 6}"/>'
                 + _head(first_x, PAD + ROW_H - 2, down=True))
    style = ("svg{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;background:#fff}"
             ".stage{fill:#f6f8fa;stroke:#8c959f}.input{fill:#ddf4ff;stroke:#1f6feb}"
             "text{text-anchor:middle;fill:#424a53;font-size:11px}.name{font-weight:600;font-size:14px;fill:#1f2328}"
             ".artifact{font-family:ui-monospace,Menlo,'DejaVu Sans Mono',monospace;fill:#0a5f9e}"
             ".flow{fill:none;stroke:#59636e;stroke-width:1.6}.head{fill:#59636e}")
    title = "The imagesmith pipeline: " + " → ".join(name for name, _, _ in PIPELINE)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img" aria-label="{esc(title)}"><title>{esc(title)}</title><style>{style}</style>{"".join(parts)}</svg>\n')


def _lines(text: str, cx: float, y: float, per_line: int = 26) -> str:
    """A description in up to two centred lines of at most ``per_line`` characters."""
    words, lines = text.split(), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + 1 + len(word) > per_line:
            lines.append("")
        lines[-1] = f"{lines[-1]} {word}".strip()
    return "".join(f'<text x="{cx}" y="{y + 14 * i}">{esc(line)}</text>' for i, line in enumerate(lines[:2]))


def _arrow(x0: float, y: float, x1: float, _y1: float) -> str:
    return f'<path class="flow" d="M{x0} {y} H{x1 - 6}"/>' + _head(x1, y)


def _head(x: float, y: float, down: bool = False) -> str:
    points = f"{x - 5},{y - 7} {x + 5},{y - 7} {x},{y}" if down else f"{x - 7},{y - 5} {x - 7},{y + 5} {x},{y}"
    return f'<polygon class="head" points="{points}"/>'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write every benchmark chart into this folder")
    parser.add_argument("--pipeline", action="store_true", help=f"rewrite {PIPELINE_SVG.relative_to(ROOT)}")
    args = parser.parse_args()
    if args.pipeline:
        PIPELINE_SVG.parent.mkdir(parents=True, exist_ok=True)
        PIPELINE_SVG.write_text(pipeline_svg(), encoding="utf-8")
        print(PIPELINE_SVG)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, chart in bench_charts().items():
            (args.out / name).write_text(chart, encoding="utf-8")
            print(args.out / name)


if __name__ == "__main__":
    main()
