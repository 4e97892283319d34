"""The Python projects SWE tasks are synthesized from: small, pure Python, tests that run in seconds
with nothing but pytest, source distributions on the package index that include those tests.

Versions are pinned, and each source distribution's SHA-256 with them: the same pin gives the same source, the
same image tag and the same instances, and the builder runs (pip's metadata step) only the archive it pinned.
"""

from __future__ import annotations

import difflib
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
    sha256: str = ""  # of the source distribution: pip checks it before it runs the archive's build code

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
        Project("toolz", "toolz==1.2.0", "pytoolz/toolz", ("toolz",), ("toolz/tests",),
                sha256="9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490"),
        Project("boltons", "boltons==26.2.0", "mahmoud/boltons", ("boltons",), ("tests",),
                sha256="d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c"),
        Project("cachetools", "cachetools==8.0.1", "tkem/cachetools", ("src/cachetools",), ("tests",), "src",
                sha256="deb1d376d4d28c2f33f3e3058043b005e0af75c35c094bd54053e27d2906ad95"),
        Project("inflection", "inflection==0.5.1", "jpvanhal/inflection",
                ("inflection",), ("test_inflection.py",),
                sha256="1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417"),
        Project("isodate", "isodate==0.7.2", "gweis/isodate", ("src/isodate",), ("tests",), "src",
                sha256="4cd1aa0f43ca76f4a6c6c0292a85f40b35ec2e43e315b59f06e6d32171a953e6"),
        Project("parse", "parse==1.22.4", "r1chardj0n3s/parse", ("parse",), ("tests",),
                sha256="706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5"),
        Project("semver", "semver==3.1.1", "python-semver/python-semver", ("src/semver",), ("tests",), "src",
                sha256="149b26cabada6f63212f97e94505d21578cb1d280cf714827f328d5e70765fea"),
        Project("six", "six==1.17.0", "benjaminp/six", ("six.py",), ("test_six.py",),
                sha256="ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81"),
        Project("tabulate", "tabulate==0.10.0", "astanin/python-tabulate", ("tabulate",), ("test",),
                sha256="e2cfde8f79420f6deeffdeda9aaec3b6bc5abce947655d17ac662b126e48a60d"),
        Project("click", "click==8.1.7", "pallets/click", ("src/click",), ("tests",), "src",
                sha256="ca9853ad459e787e2192211578cc907e7594e294c7ccc834310722b41b9ca6de"),
        Project("colorama", "colorama==0.4.6", "tartley/colorama", ("colorama",), ("colorama/tests",),
                sha256="08695f5cb7ed6e0531a20572697297273c47b8cae5a63ffc6d6ed5c201be6e44"),
        Project("idna", "idna==3.7", "kjd/idna", ("idna",), ("tests",),
                sha256="028ff3aadf0609c1fd278d8ea3089299412a7a8b9bd005dd08b9f8285bcb5cfc"),
        Project("jmespath", "jmespath==1.0.1", "jmespath/jmespath.py", ("jmespath",), ("tests",),
                sha256="90261b206d6defd58fdd5e85f478bf633a2901798906be2ad389150c5c60edbe"),
        Project("json5", "json5==0.9.25", "dpranke/pyjson5", ("json5",), ("tests",),
                sha256="548e41b9be043f9426776f05df8635a00fe06104ea51ed24b67f908856e151ae"),
        Project("markupsafe", "markupsafe==2.1.5", "pallets/markupsafe",
                ("src/markupsafe",), ("tests",), "src",
                sha256="d283d37a890ba4c1ae73ffadf8046435c76e7bc2247bbb63c00bd1a709c6544b"),
        Project("pathspec", "pathspec==0.12.1", "cpburnz/python-pathspec", ("pathspec",), ("tests",),
                sha256="a482d51503a1ab33b1c67a6c3813a26953dbdc71c31dacaef9a838c4e29f5712"),
        Project("rfc3986", "rfc3986==2.0.0", "python-hyper/rfc3986", ("src/rfc3986",), ("tests",), "src",
                sha256="97aacf9dbd4bfd829baad6e6309fa6573aaf1be3f6fa735c8ab05e46cecb261c"),
        Project("semantic_version", "semantic_version==2.10.0", "rbarrois/python-semanticversion",
                ("semantic_version",), ("tests",),
                sha256="bdabb6d336998cbb378d4b9db3a4b56a1e3235701dc05ea2690d9a997ed5041c"),
        Project("sqlparse", "sqlparse==0.5.1", "andialbrecht/sqlparse", ("sqlparse",), ("tests",),
                sha256="bb6b4df465655ef332548e24f08e205afc81b9ab86cb1c45657a7ff173a3a00e"),
        Project("termcolor", "termcolor==2.4.0", "termcolor/termcolor", ("src/termcolor",), ("tests",), "src",
                sha256="aab9e56047c8ac41ed798fa36d892a37aca6b3e9159f3e0c24bc64a9b3ac7b7a"),
        Project("unidecode", "unidecode==1.3.8", "avian2/unidecode", ("unidecode",), ("tests",),
                sha256="cfdb349d46ed3873ece4586b96aa75258726e2fa8ec21d6f00a591d98806c2f4"),
        Project("uritemplate", "uritemplate==4.1.1", "python-hyper/uritemplate", ("uritemplate",), ("tests",),
                sha256="4346edfc5c3b79f694bccd6d6099a322bbeb628dbf2cd86eea55a456ce5124f0"),
        Project("voluptuous", "voluptuous==0.14.2", "alecthomas/voluptuous",
                ("voluptuous",), ("voluptuous/tests/tests.py",),
                sha256="533e36175967a310f1b73170d091232bf881403e4ebe52a9b4ade8404d151f5d"),
        Project("wcwidth", "wcwidth==0.2.13", "jquast/wcwidth", ("wcwidth",), ("tests",),
                sha256="72ea0c06399eb286d978fdedb6923a9eb47e1c486ce63e9b4e64fc18303972b5"),
        Project("xmltodict", "xmltodict==0.13.0", "martinblech/xmltodict", ("xmltodict.py",), ("tests",),
                sha256="341595a488e3e01a85a9d8911d8912fd922ede5fecc4dce437eb4b6c8d037e56"),
    )
}


def select_projects(names: str = "") -> Tuple[Project, ...]:
    """``"a,b"`` -> those projects (an unknown name is an error listing the known ones); ``""`` -> all."""
    if not names.strip():
        return tuple(PROJECTS.values())
    chosen = []
    for name in (part.strip() for part in names.split(",") if part.strip()):
        if name not in PROJECTS:
            close = difflib.get_close_matches(name, PROJECTS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown project {name!r}{hint}; the projects are {', '.join(PROJECTS)}")
        chosen.append(PROJECTS[name])
    return tuple(chosen)
