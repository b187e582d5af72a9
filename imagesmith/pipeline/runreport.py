"""OUT/run-report.json: build, verify and release in one versioned file, ``running`` from the start, and what
the stages after a build made of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from imagesmith import runstate
from imagesmith.model.buildreport import TargetResult
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.release import publish
from imagesmith.stages.verify import verify

RUN_REPORT = "run-report.json"


class RunReport:
    """OUT/run-report.json (build + verify + release in one versioned file), written
    when the run starts (``running``), as each stage ends, and at the end
    (``complete``); leaving the ``with`` block by an exception marks it ``interrupted``."""

    def __init__(self, out: Path, build_data: Mapping[str, Any] | None = None) -> None:
        self.path = out / RUN_REPORT
        self.build_data = dict(build_data) if build_data is not None else None
        self.verify: dict[str, Mapping[str, Any]] = {}
        self.release: Mapping[str, Any] | None = None
        self.tracked = runstate.Tracked(self.path, self._doc())

    def _doc(self) -> dict[str, Any]:
        from imagesmith import report

        return report.run_report(self.build_data, self.verify, self.release)

    def built(self, build_data: Mapping[str, Any]) -> None:
        self.build_data = dict(build_data)
        self.tracked.update(self._doc())

    def verified(self, target: str, report: VerifyReport) -> None:
        self.verify[target] = report.to_json()
        self.tracked.update(self._doc())

    def released(self, release: Mapping[str, Any]) -> None:
        self.release = release
        self.tracked.update(self._doc())

    def complete(self) -> Path:
        self.tracked.complete(self._doc())
        return self.path

    def __enter__(self) -> "RunReport":
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self.tracked.stop(exc)


def write_run_report(out: Path, build_data: Mapping[str, Any], outcomes: Mapping[str, verify.VerifyOutcome],
                     release: Mapping[str, Any] | None) -> Path:
    """The whole run report at once (complete)."""
    run = RunReport(out, build_data)
    run.verify = {t: o.report.to_json() for t, o in outcomes.items()}
    run.release = release
    return run.complete()


@dataclass(frozen=True)
class RunOutcome:
    """What the stages after a build made of it: each verified image's outcome, the release (when
    one ran) and the run report that holds all of it."""

    results: tuple[TargetResult, ...]
    outcomes: Mapping[str, verify.VerifyOutcome]
    release: publish.ReleaseRun | None
    run_report: Path

    @property
    def failed(self) -> list[str]:
        """Targets whose verification failed."""
        return [t for t, o in self.outcomes.items() if not o.ok]

    @property
    def unbuilt(self) -> int:
        return sum(not r.ok for r in self.results)
