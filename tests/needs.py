"""What a test needs that a user may lack: a skip where that part is optional, a failure where the run is for it.

- vLLM: a test that needs the engine carries `@pytest.mark.vllm` (conftest skips it where vLLM does not import).
  `make test-vllm` runs exactly the marked tests (`-m vllm`) with TIMEALIGN_REQUIRE_VLLM=1: there vLLM is the job's
  purpose, so an engine that installs but does not import fails them instead of skipping. A fixture or test that
  calls `require_vllm()` without the marker fails: make test-vllm would never run it.
- ../shared (the real data and the authors' code): `.ci/run` sets TIMEALIGN_REQUIRE_SHARED=1: CI always has it beside
  the clone, so a missing file there fails; a user's checkout without it skips those tests.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"


def required(what: str) -> bool:
    return os.environ.get(f"TIMEALIGN_REQUIRE_{what}") == "1"


def vllm_missing() -> str | None:
    """None when vLLM imports; else the reason to skip. Raises under TIMEALIGN_REQUIRE_VLLM=1."""
    try:
        importlib.import_module("vllm")
    except Exception as exc:  # an installed but broken engine raises more than ImportError
        if required("VLLM"):
            raise RuntimeError(f"TIMEALIGN_REQUIRE_VLLM=1 (make test-vllm) but vLLM does not import: {exc!r}") from exc
        return f"vLLM not importable ({type(exc).__name__}): run under .venv-vllm (make test-vllm)"
    return None


# The test being set up (conftest's pytest_runtest_setup): `require_vllm` checks that it carries the vllm marker.
CURRENT_TEST: pytest.Item | None = None


def require_vllm() -> None:
    """Call at the top of a fixture (or module) that needs the vLLM engine; every test using it carries
    `@pytest.mark.vllm`, or `make test-vllm` (`-m vllm`) would leave it out."""
    test = CURRENT_TEST
    if test is not None and test.get_closest_marker("vllm") is None:
        pytest.fail(f"{test.nodeid} needs vLLM but has no @pytest.mark.vllm: make test-vllm would never run it")
    reason = vllm_missing()
    if reason:
        pytest.skip(reason, allow_module_level=True)


def shared_path(*parts: str) -> Path:
    """A path under ../shared; a skip where it is absent, a failure under TIMEALIGN_REQUIRE_SHARED=1 (CI)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"{path} absent (../shared: the real data and the authors' code, needed only by tests)"
        if required("SHARED"):
            pytest.fail(f"{message}; TIMEALIGN_REQUIRE_SHARED=1 (CI) needs it", pytrace=False)
        pytest.skip(message)
    return path
