"""The package's imports run one way: cli -> experiments -> training -> data -> model. A module may import its
own layer and the layers below it, never one above, so each layer reads without the ones above it."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transformers_scratch"
LAYERS = ["model", "data", "training", "experiments", "cli"]  # bottom to top


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name inside the package (None: the package's own __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def project_imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of the package in a file, lazy ones inside functions included."""
    module = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("transformers_scratch")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this file's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("transformers_scratch"):
                names = [f"{target}.{a.name}" for a in node.names] if layer_of(target) is None else [target]
                found += [(node.lineno, name) for name in names]
    return found


def upward_imports(root: Path = PACKAGE) -> list[str]:
    """Every import that reaches a layer above the importing file's, as 'file:line imports module'."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        own = layer_of(".".join(path.relative_to(root.parent).with_suffix("").parts))
        if own is None:
            continue
        for line, target in project_imports(path, root):
            other = layer_of(target)
            if other is not None and LAYERS.index(other) > LAYERS.index(own):
                bad.append(f"{path.relative_to(root.parent)}:{line} imports {target}")
    return bad


def test_imports_run_one_way():
    assert upward_imports() == []


def copy_importing(tmp_path: Path, file: str, target: str) -> tuple[Path, Path]:
    """A copy of the package in which ``file`` gains a lazy import (``from TARGET import ...``) at its end: the
    copy's root, and the file."""
    import shutil

    copy = tmp_path / "transformers_scratch"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    changed = copy / file
    changed.write_text(changed.read_text() + f"\n\ndef _lazy():\n    from {target}  # noqa\n")
    return copy, changed


def test_the_check_sees_an_upward_import(tmp_path):
    """The check itself: one upward import, lazy and relative, in a copy of the package, is found."""
    copy, blocks = copy_importing(tmp_path, "model/blocks.py", "..training import modules")
    assert upward_imports(copy) == [
        f"transformers_scratch/model/blocks.py:{len(blocks.read_text().splitlines())} "
        "imports transformers_scratch.training"
    ]


def import_circles(root: Path = PACKAGE) -> list[tuple[str, ...]]:
    """Every circle of imports among the files of one folder (lazy imports included), as the files in order."""
    edges: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        folder = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
        edges[module] = {t for _, t in project_imports(path, root) if t.rsplit(".", 1)[0] == folder and t != module}
    circles: set[tuple[str, ...]] = set()

    def walk(chain: list[str]) -> None:
        for nxt in sorted(edges.get(chain[-1], ())):
            if nxt == chain[0]:
                at = chain.index(min(chain))  # one name for each circle, whichever file it is entered from
                circles.add(tuple(chain[at:] + chain[:at]))
            elif nxt not in chain:
                walk([*chain, nxt])

    for start in edges:
        walk([start])
    return sorted(circles)


def test_no_import_circle_inside_a_folder():
    assert import_circles() == []


def test_the_check_sees_an_import_circle(tmp_path):
    """The check itself: a lazy import of checkpoints.py from modules.py and back, in a copy, is a circle."""
    copy, _ = copy_importing(tmp_path, "training/checkpoints.py", ".modules import LitXL")
    assert import_circles(copy) == [
        ("transformers_scratch.training.checkpoints", "transformers_scratch.training.modules")
    ]


def model_order(root: Path = PACKAGE) -> list[str]:
    """model/'s files in the order its __init__ lists them: the order to read them in."""
    doc = ast.get_docstring(ast.parse((root / "model" / "__init__.py").read_text())) or ""
    return [line.split()[0].removesuffix(".py") for line in doc.splitlines() if line.startswith("    ")]


def later_imports(root: Path = PACKAGE) -> list[str]:
    """Every import in model/ of a file that its __init__ lists at or after the importing one."""
    order, bad = model_order(root), []
    for name in order:
        for node in ast.walk(ast.parse((root / "model" / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                used = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                bad += [f"{name}.py imports {u}.py" for u in used if u in order and order.index(u) >= order.index(name)]
    return bad


def test_model_reads_bottom_up():
    assert model_order()[:4] == ["config", "positions", "cache", "attention"] and len(model_order()) == 11
    assert later_imports() == []


def test_the_check_sees_a_reversed_import(tmp_path):
    """The check itself: attention.py importing sparse.py, lazily, in a copy, is found."""
    copy, _ = copy_importing(tmp_path, "model/attention.py", ".sparse import SparseAttend")
    assert later_imports(copy) == ["attention.py imports sparse.py"]


def later_names(root: Path = PACKAGE) -> list[str]:
    """Where a model file's text names a later file: ``later.py``, a reference ``~.later`` or ```later.name``."""
    import re

    order, bad = model_order(root), []
    for i, name in enumerate(order):
        text = (root / "model" / f"{name}.py").read_text()
        for later in order[i + 1 :]:
            if re.search(rf"\b{later}\.py\b|~\.{later}\b|``{later}\.", text):
                bad.append(f"{name}.py names {later}")
    return bad


def test_a_reader_meets_no_later_files_name():
    """Read bottom-up, no file's docstrings or comments send the reader ahead to a file not yet read."""
    assert later_names() == []


def test_the_check_sees_a_later_name(tmp_path):
    copy, blocks = copy_importing(tmp_path, "model/blocks.py", "math import pi")
    blocks.write_text(blocks.read_text() + "# see ``sparse.layer_kernels``\n")
    assert later_names(copy) == ["blocks.py names sparse"]


@pytest.mark.parametrize("layer", ["model"])
def test_the_model_imports_no_lightning(layer):
    """model/ is plain PyTorch: no Lightning, torchmetrics or W&B, not even lazily."""
    for path in (PACKAGE / layer).rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] in ("lightning", "torchmetrics", "wandb")], path


def test_one_module_touches_hugging_face():
    """model/hf.py is the interop: no other module imports transformers or huggingface_hub, and it does so only
    inside the function that needs them, so that importing the package needs neither."""
    touching = {}
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        if any(n.split(".")[0] in ("transformers", "huggingface_hub") for n in names):
            touching[path.relative_to(PACKAGE).as_posix()] = tree
    assert list(touching) == ["model/hf.py"]
    top = [n for n in touching["model/hf.py"].body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [
        n for n in top if (getattr(n, "module", None) or n.names[0].name).startswith(("transformers", "huggingface"))
    ]


def test_the_gpu_script_imports_only_names_the_package_has():
    """``.ci/gpu`` runs only where a GPU is lent, so a change of the package that breaks it would show there alone,
    after the GPU's time is spent: every name it imports from the package must exist here."""
    import importlib

    script = PACKAGE.parent / ".ci" / "gpu"
    imported = [(node.module, a.name) for node in ast.walk(ast.parse(script.read_text(), str(script)))
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers_scratch")
                for a in node.names]  # fmt: skip
    assert len(imported) >= 3
    missing = [f"{m}.{n}" for m, n in imported if not hasattr(importlib.import_module(m), n)]
    assert not missing, f".ci/gpu imports names the package no longer has: {missing}"


# The package's size as `wc -l` counts it, a folder at a time (top: the files beside the folders). A change may
# shrink a folder and lower its line here; one that must grow a folder raises its line here, in its own commit,
# so that growth is a decision and not accretion.
LINE_BUDGET = {"top": 404, "cli": 2_133, "data": 1_868, "experiments": 1_406, "model": 2_705, "training": 2_751}


def lines_by_folder(root: Path = PACKAGE) -> dict[str, int]:
    """Lines of the package's Python files (as ``wc -l`` counts them), a folder at a time."""
    counts = dict.fromkeys(LINE_BUDGET, 0)
    for path in root.rglob("*.py"):
        folder = path.relative_to(root).parts[0] if len(path.relative_to(root).parts) > 1 else "top"
        counts[folder] = counts.get(folder, 0) + path.read_bytes().count(b"\n")
    return counts


def over_budget(root: Path = PACKAGE) -> list[str]:
    """Each folder past its line in :data:`LINE_BUDGET`, by how much."""
    return [f"{folder}/: {n:,} lines, {n - LINE_BUDGET.get(folder, 0):,} past its budget of "
            f"{LINE_BUDGET.get(folder, 0):,}" for folder, n in lines_by_folder(root).items()
            if n > LINE_BUDGET.get(folder, 0)]  # fmt: skip


def test_the_package_stays_within_its_line_budget():
    """No folder grows past its budget; make room in the folder, or raise its line in LINE_BUDGET on purpose."""
    assert over_budget() == []


def test_the_check_sees_a_folder_grow(tmp_path):
    """The check itself: one line added to a copy of cli/, and a new folder, are each past their budget."""
    copy, _ = copy_importing(tmp_path, "cli/errors.py", "math import pi")  # the function adds 4 lines
    (copy / "extra").mkdir()
    (copy / "extra" / "x.py").write_text("x = 1\n")
    assert [line.split(":")[0] for line in over_budget(copy)] == ["cli/", "extra/"]
    assert over_budget(copy)[0].startswith(f"cli/: {LINE_BUDGET['cli'] + 4:,} lines, 4 past")
