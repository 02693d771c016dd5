"""`.ci/lowest-versions.txt` (what `make test-lowest` installs) is pyproject.toml's floors: a floor is tested, not
hoped (issue 41: TIMER SFT crashed under transformers 5.16.1-5.18.x while CI tested 5.19 only)."""

from __future__ import annotations

from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
TRAINER_LIBRARIES = ("transformers", "trl", "peft", "accelerate", "datasets")


def _lowest_pins() -> dict[str, Requirement]:
    lines = (REPO / ".ci" / "lowest-versions.txt").read_text().splitlines()
    return {r.name.lower(): r for r in (Requirement(x) for x in lines if x.strip() and not x.startswith("#"))}


def _floor(requirement: Requirement) -> Version:
    floors = [Version(s.version.rstrip(".*")) for s in requirement.specifier if s.operator in (">=", "==", "~=")]
    assert len(floors) == 1, f"pyproject gives {requirement} no single lowest version"
    return floors[0]


def test_lowest_versions_are_pyprojects_floors():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    allowed = {r.name.lower(): r for r in map(Requirement, dependencies)}
    pins = _lowest_pins()
    for name in TRAINER_LIBRARIES:
        (pin,) = pins[name].specifier
        assert pin.operator == "==", f".ci/lowest-versions.txt must pin {name} exactly, not {pin}"
        assert Version(pin.version) == _floor(allowed[name]), (
            f"{name}: pyproject allows {allowed[name]}, CI tests {pin}"
        )
        assert allowed[name].specifier.contains(pin.version), name
    # torch: the only CPU build the registry serves is pinned; it must still be one pyproject allows.
    (torch_pin,) = pins["torch"].specifier
    assert allowed["torch"].specifier.contains(torch_pin.version)
