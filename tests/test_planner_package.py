"""The ``planner`` package's lazy imports (``planner/__init__.py``): its public names are imported on
first use, so a light submodule (:mod:`planner.profiles`, what ``flowplan plan --help`` reads) loads
no models, NumPy, SciPy, pandas, pydantic or OR-Tools; and ``planner.plan`` is the function
:func:`planner.core.plan` in every import order, although ``planner/plan.py`` is a submodule of the same
name (importing it makes Python set the package's attribute ``plan`` to the submodule).

Each import order runs in a fresh interpreter (a subprocess: this one has imported everything already).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import get_args

import pytest
from conftest import REPO

import planner
from planner.profiles import OBJECTIVE_ALIASES, OBJECTIVE_MEANINGS, OBJECTIVE_PROFILES, ObjectiveProfile
from planner.snapshot import Settings


def fresh(code: str) -> str:
    """Run ``code`` in a new interpreter from the checkout; its standard output."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


#: What runs before ``from planner import plan``: the submodule ``planner.plan`` first in several ways.
FIRST = {
    "import planner.plan": "import planner.plan",
    "from planner.plan import Plan": "from planner.plan import Plan",
    "importlib planner.plan": "import importlib; importlib.import_module('planner.plan')",
    "import planner.check (imports planner.plan)": "import planner.check",
    "import planner.snapshot": "import planner.snapshot",
    "import planner.plan, then planner.core": "import planner.plan, planner.core",
    "import planner.core": "import planner.core",
    "import planner.policies": "import planner.policies",
    "import planner": "import planner",
    "nothing": "",
}


@pytest.mark.parametrize("first", FIRST.values(), ids=list(FIRST))
def test_plan_is_the_function_in_every_import_order(first: str) -> None:
    code = f"""{first}
from planner import plan
import sys
import planner, planner.core
assert callable(plan) and plan is planner.core.plan, plan
assert planner.plan is planner.core.plan, planner.plan
from planner import plan as again
assert again is planner.core.plan, again
assert sys.modules["planner.plan"].Plan is planner.Plan  # the submodule is still there, by its full name
from planner.plan import Assignment
assert Assignment is planner.Assignment
print("ok")
"""
    assert fresh(code).split() == ["ok"]


def test_plan_called_after_the_submodule_was_imported_first() -> None:
    """``planner.plan(snapshot)`` plans (not "module is not callable") when ``planner.plan`` the submodule was
    imported before anything else."""
    code = """import planner.plan
import planner
from planner.snapshot import Snapshot
result = planner.plan(Snapshot(time=0.0))
print(type(result).__name__, result.plan.kind)
"""
    assert fresh(code).split() == ["PlanResult", "Plan"]


#: Modules a light import of the planner must not load.
HEAVY = ("models", "numpy", "scipy", "pandas", "ortools", "pulp", "pydantic")


def test_profiles_import_nothing_heavy() -> None:
    """``import planner.profiles`` loads the package and that module only: none of the planner's other
    submodules, the models or the third-party packages behind them."""
    code = f"""import sys
import planner.profiles
print(*sorted(m for m in sys.modules if m.split(".")[0] in {("planner", *HEAVY)!r}))
"""
    assert fresh(code).split() == ["planner", "planner.profiles"]


def test_every_public_name_resolves_to_its_submodule() -> None:
    """``from planner import *`` (each name of ``__all__``, imported lazily) gives the object of the submodule
    it comes from, and no name is missing from ``__all__``."""
    assert sorted(planner.__all__) == sorted(planner._SOURCES)
    code = """import importlib
import planner
from planner import *
names = dict(globals())
for name in planner.__all__:
    assert names[name] is getattr(importlib.import_module(planner._SOURCES[name]), name), name
print(len(planner.__all__))
"""
    assert fresh(code).split() == [str(len(planner.__all__))]
    for name in planner.__all__:
        assert getattr(planner, name) is getattr(importlib.import_module(planner._SOURCES[name]), name)


def test_submodules_reachable_after_import_planner() -> None:
    """``import planner`` used to import its submodules; ``planner.core`` and the like still resolve (on first
    use), and an unknown name is an ``AttributeError``."""
    code = """import planner
assert planner.core.plan is planner.plan
assert planner.snapshot.Snapshot is planner.Snapshot
try:
    planner.no_such_name
except AttributeError as exc:
    print("AttributeError", exc)
"""
    assert fresh(code).split()[0] == "AttributeError"


def test_profiles_are_one_list() -> None:
    """The profiles' names, meanings, short names and the snapshot's ``Settings.objective`` agree."""
    assert tuple(get_args(ObjectiveProfile)) == OBJECTIVE_PROFILES
    assert tuple(OBJECTIVE_MEANINGS) == OBJECTIVE_PROFILES
    assert set(OBJECTIVE_ALIASES.values()) == set(OBJECTIVE_PROFILES)
    assert Settings.model_json_schema()["properties"]["objective"]["enum"] == list(OBJECTIVE_PROFILES)
