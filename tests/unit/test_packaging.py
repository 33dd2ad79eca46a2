"""The installed package needs only what it declares: a plain ``pip install
chatarchive`` (the README's quickstart) must be able to import every module
outside the integrations, whose frameworks come with their extras."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: Run in a new interpreter: every module of the package but the
#: integrations imported, then the top-level names of the modules that this
#: brought in (not those the interpreter had loaded before, such as a
#: ``.pth`` file's).
_IMPORT_ALL = """
import importlib, json, pkgutil, sys
before = {name.split(".")[0] for name in sys.modules}
import chatarchive
for info in pkgutil.walk_packages(chatarchive.__path__, "chatarchive."):
    if not info.name.startswith("chatarchive.integrations."):
        importlib.import_module(info.name)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules} - before)))
"""


def _declared(distribution: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """The distributions that installing ``distribution`` (with ``extras``)
    brings, all the way down, as far as they are installed here."""
    found: set[str] = set()
    pending = [(distribution, extras)]
    while pending:
        name, wanted = pending.pop()
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requirements:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is not None and not any(marker.evaluate({"extra": extra}) for extra in {"", *wanted}):
                continue
            key = canonicalize_name(requirement.name)
            if key not in found:
                found.add(key)
                pending.append((key, frozenset(requirement.extras)))
    return found


def test_every_module_outside_the_integrations_imports_only_declared_dependencies() -> None:
    imported = json.loads(
        subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, check=True).stdout
    )
    owners = metadata.packages_distributions()
    used = {canonicalize_name(dist) for module in imported for dist in owners.get(module, [])}
    assert used - _declared("chatarchive") - {"chatarchive"} == set()


#: Each integration, the extra that installs its framework, and the framework's modules.
_INTEGRATIONS = {
    "langchain": ("langchain", ["langchain_core"]),
    "openai_agents": ("openai-agents", ["agents"]),
    "pydantic_ai": ("pydantic-ai", ["pydantic_ai"]),
    "llama_index": ("llama-index", ["llama_index"]),
    "langgraph": ("langgraph", ["langgraph"]),
    "mcp": ("mcp", ["mcp"]),
    "presidio": ("presidio", ["presidio_analyzer"]),
}


@pytest.mark.parametrize("integration", sorted(_INTEGRATIONS))
def test_an_integration_without_its_framework_says_which_extra_to_install(integration: str) -> None:
    extra, modules = _INTEGRATIONS[integration]
    # A module set to None in sys.modules cannot be imported: as if it were not installed.
    hidden = "; ".join(f"sys.modules[{module!r}] = None" for module in modules)
    imported = subprocess.run(
        [sys.executable, "-c", f"import sys; {hidden}; import chatarchive.integrations.{integration}"],
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 1
    last = imported.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: chatarchive.integrations.{integration} needs ")
    assert last.endswith(f"pip install 'chatarchive[{extra}]'")
