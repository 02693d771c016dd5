"""The package layout holds: data flows one way, no import cycles, no private names across modules.

Read from the code's own imports (every `import` / `from ... import`, also those inside functions), so a lazy
import that climbs a layer counts as much as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "timealign"

# What each package may import (besides itself). Lower layers never import upper ones:
# config -> render -> data -> models -> backends -> suites -> train (evaluation while training scores with the
# evaluator's backends and suites) and -> eval; experiment on top. Nothing below imports train or eval.
ALLOWED = {
    "config": set(),
    "render": {"config"},
    "data": {"config", "render"},
    "models": {"config", "render", "data"},
    "train": {"config", "render", "data", "models", "backends", "suites"},
    "backends": {"config", "render", "models"},
    "suites": {"config", "render", "data", "models", "backends"},
    "eval": {"config", "render", "data", "models", "backends", "suites"},
    "cluster": {"config"},
    # the gateway renders with the evaluator's renderer and detector and reads a checkpoint's recipe as eval does
    "serve": {"config", "render", "backends", "suites", "eval"},
    "experiment": {"config", "render", "data", "models", "train", "backends", "suites", "eval"},
    # The `timealign` console command (and `python -m timealign`): it names the entry points as text and imports
    # the chosen one by name, so it sits on top without importing any layer but config.
    "cli": {"config"},
    "__main__": {"cli"},
}
# Single modules allowed more than their package, with the reason. data.direct_answer=generate makes data prep
# generate with the evaluator's backends (tool calls are judged with timealign.render.tool_calls, below data); the
# imports are inside the functions that run only then, so `timealign.data` never loads an engine.
# The TicToc suite puts the elapsed-time rule's line in every report with an interval of the same kind as the model's
# (eval.bootstrap resamples its per-sample decisions as it does the model's); imported inside that one function.
EXCEPTIONS = {"timealign.data.generated_answers": {"backends"}, "timealign.suites.tictoc.suite": {"eval"}}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names, line) of every timealign import in the file, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and _is_type_checking(block.test)
        for stmt in block.body
        for n in ast.walk(stmt)
    }  # annotations only: never run
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("timealign")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            if module.startswith("timealign"):
                found.append((module, [a.name for a in node.names], node.lineno))
    return found


def _sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py"))


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_package_has_a_layer():
    packages = {_layer(_module_name(p)) for p in _sources()} - {None}
    assert packages <= set(ALLOWED), f"add {sorted(packages - set(ALLOWED))} to ALLOWED with its allowed imports"


def test_data_flows_one_way():
    upward = []
    for path in _sources():
        source = _layer(_module_name(path))
        for module, _, line in _imports(path):
            target = _layer(module)
            allowed = ALLOWED.get(source, set()) | EXCEPTIONS.get(_module_name(path), set())
            if source and target and target != source and target not in allowed:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} imports {module} ({source} -> {target})")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_import_cycles():
    modules = {_module_name(p): p for p in _sources()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for module, names, _ in _imports(path):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules] or [module]
            graph[name].update(t for t in targets if t in modules and t != name and not name.startswith(t + "."))
    # Tarjan's strongly connected components
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_no_private_names_imported_across_modules():
    private = []
    for path in _sources():
        for module, names, line in _imports(path):
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    private.append(f"{path.relative_to(ROOT.parent)}:{line} imports {module}.{name}")
    assert not private, "\n".join(private)


def test_test_modules_share_helpers_not_each_other():
    """Shared builders live in tests/helpers.py and fixtures in conftest.py: no test module imports another test
    module or conftest (a test file renamed or trimmed must not break its neighbours)."""
    tests = Path(__file__).resolve().parent
    offenders = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            offenders += [
                f"{path.name}:{node.lineno} imports {n}" for n in names if n == "conftest" or n.startswith("test_")
            ]
    assert offenders == [], offenders


def test_make_test_vllm_runs_every_vllm_test():
    """`make test-vllm` runs the `@pytest.mark.vllm` tests (`-m vllm`) of the files it names: every file with such a
    test (or a fixture calling `require_vllm`) is named there, and no file without one."""
    import re

    tests = Path(__file__).resolve().parent
    makefile = (tests.parent / "Makefile").read_text()
    recipe = re.search(r"^test-vllm:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe and " -m vllm" in recipe.group(1), "make test-vllm should select the vllm-marked tests (-m vllm)"
    named = set(re.findall(r"tests/(test_\w+\.py)", recipe.group(1)))
    needing = {
        path.name
        for path in tests.glob("test_*.py")
        if re.search(r"pytest\.mark\.vllm|require_vllm\(\)", path.read_text()) and path.name != "test_layout.py"
    }
    assert named == needing, f"make test-vllm names {sorted(named - needing)} in vain, lacks {sorted(needing - named)}"
