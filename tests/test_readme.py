"""The README's commands, and those of its pages in .readme/, parse: every `python cli.py ...` and benchmark line
names real configs and flags. The README stays short and says nothing of how the project was made."""

import re
import shlex
from pathlib import Path

import pytest

from transformers_scratch.cli import EXPERIMENTS, FUNCTIONS, build_cli, run_function

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / ".readme").glob("*.md"))]
README = "\n".join(page.read_text() for page in PAGES)


def commands(prefix: str) -> list[list[str]]:
    """Shell lines in the README's code blocks that start with prefix, continuations joined, comments cut."""
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    found = []
    for line in lines:
        for part in line.split("&&"):
            part = part.split(" #")[0].strip()
            if part.startswith(prefix):
                found.append(shlex.split(part)[len(shlex.split(prefix)) :])
    return found


CLI_LINES = commands("python cli.py")
BENCH_LINES = commands("python -m transformers_scratch.experiments.bench")


def test_readme_has_the_commands():
    subcommands = {line[0] for line in CLI_LINES}
    assert {"fit", "test", "predict", *FUNCTIONS, *EXPERIMENTS} <= subcommands
    assert ["fit", "--config", "configs/enwik8.yaml"] in CLI_LINES  # the main job
    assert len(BENCH_LINES) >= 3


def test_the_readme_is_short_and_about_the_project():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for page in PAGES:
        words = page.read_text().lower()
        assert not [w for w in ("session", "issue #", "closing note") if w in words], page.name


OWN = {name for name in FUNCTIONS if name != "plot"}  # beside LightningCLI's; each reads a file of weights


@pytest.mark.parametrize("argv", [a for a in CLI_LINES if a[0] not in (*FUNCTIONS, *EXPERIMENTS)], ids=" ".join)
def test_cli_lines_parse(argv, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as done:
        build_cli([*argv, "--print_config"])
    assert done.value.code == 0, capsys.readouterr().err
    assert "class_path" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [a for a in CLI_LINES if a[0] in OWN], ids=" ".join)
def test_sample_and_export_lines_parse(argv, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    ckpt = argv.index("--ckpt_path" if "--ckpt_path" in argv else "--state_dict") + 1  # convert_xl reads the latter
    with pytest.raises((FileNotFoundError, ValueError), match="does not exist"):  # flags parsed; no model, no text
        run_function(argv[0], [*argv[1:ckpt], "no/such.ckpt", *argv[ckpt + 1 :]])


@pytest.mark.parametrize("argv", [a for a in CLI_LINES if a[0] == "plot"], ids=" ".join)
def test_plot_lines_parse(argv, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no run here: the flags parse, and the missing log is named
    with pytest.raises(FileNotFoundError, match="metrics.csv' does not exist"):
        run_function("plot", argv[1:])


@pytest.mark.parametrize("argv", BENCH_LINES, ids=" ".join)
def test_bench_lines_parse(argv):
    from transformers_scratch.experiments.bench import build_parser

    args = build_parser().parse_args(argv)
    if args.config:
        assert (ROOT / args.config).is_file()
