"""The Python projects SWE tasks are synthesized from: small, pure Python, tests that run in seconds
with nothing but pytest, source distributions on the package index that include those tests.

Versions are pinned: the same pin gives the same source, the same image tag and the same instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple


@dataclass(frozen=True)
class Project:
    name: str
    requirement: str  # a pinned requirement: the source distribution to fetch
    repo: str  # the upstream repository, as SWE-bench rows name it (owner/name)
    sources: Tuple[str, ...]  # package folders or modules to inject bugs into, relative to the sdist root
    tests: Tuple[str, ...]  # test folders or files, relative to the sdist root
    pythonpath: str = ""  # relative folder to put on PYTHONPATH ("src" for src layouts)

    @property
    def version(self) -> str:
        return self.requirement.partition("==")[2]

    @property
    def import_names(self) -> Tuple[str, ...]:
        """The top-level modules or packages the sources define (``src/cachetools`` -> ``cachetools``)."""
        return tuple(source.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py") for source in self.sources)

    def spec(self) -> Dict[str, object]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


PROJECTS: Dict[str, Project] = {
    project.name: project
    for project in (
        Project("toolz", "toolz==1.2.0", "pytoolz/toolz", ("toolz",), ("toolz/tests",)),
        Project("boltons", "boltons==26.2.0", "mahmoud/boltons", ("boltons",), ("tests",)),
        Project("cachetools", "cachetools==8.0.1", "tkem/cachetools", ("src/cachetools",), ("tests",), "src"),
        Project("inflection", "inflection==0.5.1", "jpvanhal/inflection", ("inflection",), ("test_inflection.py",)),
        Project("isodate", "isodate==0.7.2", "gweis/isodate", ("src/isodate",), ("tests",), "src"),
        Project("parse", "parse==1.22.4", "r1chardj0n3s/parse", ("parse",), ("tests",)),
        Project("semver", "semver==3.1.1", "python-semver/python-semver", ("src/semver",), ("tests",), "src"),
        Project("six", "six==1.17.0", "benjaminp/six", ("six.py",), ("test_six.py",)),
        Project("tabulate", "tabulate==0.10.0", "astanin/python-tabulate", ("tabulate",), ("test",)),
        Project("click", "click==8.1.7", "pallets/click", ("src/click",), ("tests",), "src"),
        Project("colorama", "colorama==0.4.6", "tartley/colorama", ("colorama",), ("colorama/tests",)),
        Project("idna", "idna==3.7", "kjd/idna", ("idna",), ("tests",)),
        Project("jmespath", "jmespath==1.0.1", "jmespath/jmespath.py", ("jmespath",), ("tests",)),
        Project("json5", "json5==0.9.25", "dpranke/pyjson5", ("json5",), ("tests",)),
        Project("markupsafe", "markupsafe==2.1.5", "pallets/markupsafe", ("src/markupsafe",), ("tests",), "src"),
        Project("pathspec", "pathspec==0.12.1", "cpburnz/python-pathspec", ("pathspec",), ("tests",)),
        Project("rfc3986", "rfc3986==2.0.0", "python-hyper/rfc3986", ("src/rfc3986",), ("tests",), "src"),
        Project("semantic_version", "semantic_version==2.10.0", "rbarrois/python-semanticversion",
                ("semantic_version",), ("tests",)),
        Project("sqlparse", "sqlparse==0.5.1", "andialbrecht/sqlparse", ("sqlparse",), ("tests",)),
        Project("termcolor", "termcolor==2.4.0", "termcolor/termcolor", ("src/termcolor",), ("tests",), "src"),
        Project("unidecode", "unidecode==1.3.8", "avian2/unidecode", ("unidecode",), ("tests",)),
        Project("uritemplate", "uritemplate==4.1.1", "python-hyper/uritemplate", ("uritemplate",), ("tests",)),
        Project("voluptuous", "voluptuous==0.14.2", "alecthomas/voluptuous", ("voluptuous",),
                ("voluptuous/tests/tests.py",)),
        Project("wcwidth", "wcwidth==0.2.13", "jquast/wcwidth", ("wcwidth",), ("tests",)),
        Project("xmltodict", "xmltodict==0.13.0", "martinblech/xmltodict", ("xmltodict.py",), ("tests",)),
    )
}


def select_projects(names: str = "") -> Tuple[Project, ...]:
    """``"a,b"`` -> those projects (an unknown name is an error listing the known ones); ``""`` -> all."""
    if not names.strip():
        return tuple(PROJECTS.values())
    chosen = []
    for name in (part.strip() for part in names.split(",") if part.strip()):
        if name not in PROJECTS:
            raise ValueError(f"unknown project {name!r}; the projects are {', '.join(PROJECTS)}")
        chosen.append(PROJECTS[name])
    return tuple(chosen)
