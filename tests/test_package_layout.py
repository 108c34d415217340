"""The package's shape (docs/layout.md): imports follow the data flow, with no cycle between subpackages, and only
the launcher knows about absl flags."""

import ast
import pathlib

KITM = pathlib.Path(__file__).resolve().parents[1] / "kitm"


def _imports(path: pathlib.Path, module: str) -> set[str]:
    """The kitm modules `path` imports (at any depth: function-level imports count too)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base) if node.level else node.module
            if target:
                found.add(target)
    return {name for name in found if name == "kitm" or name.startswith("kitm.")}


def _modules() -> dict[str, pathlib.Path]:
    modules = {}
    for path in sorted(KITM.rglob("*.py")):
        parts = path.relative_to(KITM.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _unit(module: str) -> str:
    """A module's unit of the layering: its subpackage under kitm (kitm.data, kitm.launch, kitm.errors...)."""
    return ".".join(module.split(".")[:2])


def subpackage_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in _modules().items():
        source = _unit(module)
        for target in _imports(path, module):
            if target != "kitm" and _unit(target) != source:
                graph.setdefault(source, set()).add(_unit(target))
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path [a, b, ..., a], or None (depth-first search with colours)."""
    colour, stack = {}, []

    def visit(node):
        colour[node] = "grey"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == "grey":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in colour:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        colour[node] = "black"
        return None

    for node in sorted(graph):
        if node not in colour:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_layering():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}}) is None


def test_no_import_cycle_between_subpackages():
    graph = subpackage_graph()
    assert "kitm.data" in graph and "kitm.relevance" in graph["kitm.data"]  # the graph is really read
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def module_graph() -> dict[str, set[str]]:
    """Every kitm module -> the kitm modules it imports, at any depth (function-level imports count).

    ``from kitm.pkg import name`` is an edge to the submodule ``kitm.pkg.name`` when there is one (importing a
    submodule does not run a cycle through its package), else to the package ``kitm.pkg`` itself."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base) if node.level else node.module
                for alias in node.names if target else ():
                    submodule = f"{target}.{alias.name}"
                    targets.add(submodule if submodule in modules else target)
        graph[module] = {target for target in targets if target in modules and target != module}
    return graph


def test_no_import_cycle_between_modules():
    graph = module_graph()
    assert "kitm.experiment.objectives" in graph["kitm.experiment.presets"]  # the graph is really read
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_layering_of_architecture_md():
    graph = subpackage_graph()
    assert "kitm.data" not in graph.get("kitm.relevance", set()), "relevance computation must not read records"
    assert "kitm.training" not in graph.get("kitm.models", set()), "models never import training"
    for package in ("kitm.distribute", "kitm.errors", "kitm.files", "kitm.run_lock", "kitm.progress",
                    "kitm.tensorflow_logs"):
        assert graph.get(package, set()) <= {"kitm.errors"}, f"{package} is a leaf: {graph.get(package)}"
    # The numeric kernels ask the seam for the backend, and nothing else.
    assert graph.get("kitm.ops", set()) <= {"kitm.errors", "kitm.distribute"}, graph.get("kitm.ops")
    # Nothing imports the launcher; the launcher imports only the experiment API, the error module, and the leaf
    # that quiets TensorFlow's C++ log before the experiment API imports TensorFlow.
    assert not [source for source, targets in graph.items() if "kitm.launch" in targets]
    assert graph["kitm.launch"] <= {"kitm.experiment", "kitm.errors", "kitm.tensorflow_logs"}


# The seam (docs/layout.md; docs/backends.md, "Where the backend is decided"): the model side asks kitm.distribute for
# the backend and the replicas. TensorFlow's own job on the model side: tensorflow-text tokenization (the tokenizer
# layers).
MODEL_SIDE = ("losses", "layers", "models", "metrics")
TENSORFLOW_JOBS = {"kitm/layers/tokenizer.py", "kitm/layers/hub_tokenizers.py"}


def backend_probes(path: pathlib.Path) -> list[str]:
    """What in `path` finds out the backend itself or imports TensorFlow: `keras.backend.backend()`, `KERAS_BACKEND`
    read from the environment, a `sys.modules` probe for TensorFlow, `import tensorflow` (at any depth)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"import {alias.name}" for alias in node.names if alias.name.split(".")[0] == "tensorflow"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tensorflow":
            found.append(f"from {node.module} import")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("keras.backend.backend", "backend.backend"):
            found.append(f"{ast.unparse(node)} at line {node.lineno}")
        elif isinstance(node, (ast.Call, ast.Compare, ast.Subscript)) and "sys.modules" in ast.unparse(node) \
                and "tensorflow" in ast.unparse(node):
            found.append(f"{ast.unparse(node)} at line {node.lineno}")
        elif isinstance(node, ast.Constant) and node.value == "KERAS_BACKEND" and path.name != "__init__.py":
            found.append(f"'KERAS_BACKEND' at line {node.lineno}")
    return found


def test_the_probe_finder_finds_what_it_looks_for(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import sys\nimport keras\ndef f():\n    import tensorflow as tf\n"
                      "    return keras.backend.backend(), sys.modules.get('tensorflow'), os.environ['KERAS_BACKEND']\n"
                      "def g():\n    return 'ipykernel' in sys.modules\n")
    assert len(backend_probes(module)) == 4


def test_the_model_side_asks_the_seam_for_the_backend_and_imports_no_tensorflow():
    offenders = {}
    for folder in MODEL_SIDE:
        for path in sorted((KITM / folder).rglob("*.py")):
            name = path.relative_to(KITM.parent).as_posix()
            if name not in TENSORFLOW_JOBS and backend_probes(path):
                offenders[name] = backend_probes(path)
    assert not offenders, offenders


def test_only_the_seam_finds_out_the_backend():
    """Everywhere in kitm the backend is kitm.distribute's answer (the environment variable is set as a default in
    kitm/__init__.py only); TensorFlow is imported where it is the job (data, serving, training's strategies)."""
    offenders = {}
    for path in sorted(KITM.rglob("*.py")):
        name = path.relative_to(KITM.parent).as_posix()
        if name.startswith("kitm/distribute/") or name == "kitm/__init__.py":
            continue
        probes = [probe for probe in backend_probes(path) if not probe.startswith(("import ", "from "))]
        if probes:
            offenders[name] = probes
    assert not offenders, offenders


def test_only_the_launcher_imports_absl():
    users = sorted(module for module, path in _modules().items()
                   if any(isinstance(node, (ast.Import, ast.ImportFrom))
                          and any((alias.name if isinstance(node, ast.Import) else node.module or "").startswith("absl")
                                  for alias in node.names)
                          for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
    assert users == ["kitm.launch"]


# The size rules (issue 23): no module of kitm over MAX_MODULE_LINES lines, no function over MAX_FUNCTION_LINES
# (end_lineno - lineno + 1, decorators aside), so that each module keeps one job and each function a few named steps.
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
# Still too long, in modules being edited elsewhere: split them, then take them out of this list (the test below
# fails on an entry that no longer needs to be here, so that the list only shrinks).
SIZE_RULE_PENDING: set[str] = set()


def size_offenders() -> dict[str, int]:
    """{"kitm/<module>.py": lines} for every module over MAX_MODULE_LINES and {"kitm/<module>.py::<function>":
    lines} for every function (methods and nested functions included) over MAX_FUNCTION_LINES."""
    found = {}
    for path in sorted(KITM.rglob("*.py")):
        name = path.relative_to(KITM.parent).as_posix()
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found[name] = lines
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found[f"{name}::{node.name}"] = length
    return found


def test_the_size_finder_counts_lines(tmp_path, monkeypatch):
    package = tmp_path / "kitm"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    (package / "short.py").write_text(f"def fits():\n{body}\n")  # exactly MAX_FUNCTION_LINES lines
    (package / "long.py").write_text(f"def too_long():\n{body}\n    return x0\n" + "\n" * MAX_MODULE_LINES)
    monkeypatch.setitem(globals(), "KITM", package)
    assert size_offenders() == {"kitm/long.py": MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES,
                                "kitm/long.py::too_long": MAX_FUNCTION_LINES + 1}


def test_no_module_over_500_lines_and_no_function_over_80_lines():
    offenders = size_offenders()
    new = {name: lines for name, lines in offenders.items() if name not in SIZE_RULE_PENDING}
    assert not new, f"split these into modules of one job / functions of a few named steps: {new}"
    done = sorted(SIZE_RULE_PENDING - set(offenders))
    assert not done, f"these fit the size rules now: take them out of SIZE_RULE_PENDING: {done}"


def test_what_kitm_writes_into_a_clone_is_ignored_by_git():
    """Run folders, built records, search indexes and the second CI environment never show in `git status`
    (.gitignore; docs/bad-input.md, "the second round")."""
    import subprocess

    root = KITM.parent
    paths = ["runs/demo/summary.json", "tfrecords/synthetic/dataset.json", "indexes/demo/manifest.json",
             ".venv-without-tensorflow/bin/python"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=root, capture_output=True, text=True)
    assert ignored.stdout.split() == paths
