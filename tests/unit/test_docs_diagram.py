"""The architecture diagram appears in README and in docs/architecture.md; the two copies
must stay the same text, so a reader of either sees the same map."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _first_fenced_block(text: str) -> str:
    found = re.search(r"```\n(.*?)```", text, re.S)
    assert found, "no fenced block found"
    return found.group(1)


def test_readme_and_architecture_show_the_same_diagram():
    readme = (ROOT / "README.md").read_text()
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    readme_diagram = _first_fenced_block(readme[readme.index("## Architecture\n") :])
    assert readme_diagram == _first_fenced_block(architecture)
    for package in ("source/", "sink/", "broker/", "store/", "client/", "offsets/", "auth/"):
        assert package in readme_diagram, f"the diagram does not show {package}"
