"""SWE task instances in the SWE-bench row format, from a JSONL file or a dataset on the hub.

A row has SWE-bench's fields: ``instance_id``, ``repo``, ``base_commit``, ``problem_statement``,
``hints_text``, ``patch`` (the gold fix), ``test_patch`` (the hidden tests), ``FAIL_TO_PASS``,
``PASS_TO_PASS`` (lists of test ids, or SWE-bench's JSON strings of them) and ``version``. How to
get the environment is one of:

* ``image_name``: a Docker image whose ``/testbed`` holds the repository (our built instances, and
  any row that names its image);
* ``docker_image``: R2E-Gym's spelling of the same;
* neither: SWE-bench's image naming, ``{namespace}/sweb.eval.x86_64.{instance_id}:latest`` (with
  ``__`` written ``_1776_``), for rows from SWE-bench and SWE-Gym.

Rows built by ``skyrl-gym swe build`` add ``setup_patch``: the diff from the image's ``/testbed``
to the repository at ``base_commit`` (the injected bug, the hidden tests taken out); the runtime
applies it and commits it with fixed metadata, which reproduces ``base_commit`` exactly.
The grader runs pytest, so every test id must be a pytest node id (``path/to/test_x.py::TestY::test_z``, or a
file), except in rows of ``django/django`` and ``sympy/sympy``, whose tests run under their project's own runner as
SWE-bench runs them (on the test modules of the ``test_patch``) and are named as it names them: Django's
``test_x (app.tests.TestY)`` or the first line of the test's docstring, SymPy's bare ``test_x``.
:attr:`SWEInstance.grading_problem` says why a row's cannot be graded. A ``test_cmd`` field is kept with the row
but not used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Union

from skyrl_gym.errors import DataError

REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS")
SWEBENCH_NAMESPACE = "swebench"
# Hub datasets whose rows load through `load_instances` (the name a user passes -> what it is).
KNOWN_HUB_DATASETS = {
    "princeton-nlp/SWE-bench": "SWE-bench (2,294 test instances)",
    "princeton-nlp/SWE-bench_Lite": "SWE-bench Lite (300 test instances)",
    "princeton-nlp/SWE-bench_Verified": "SWE-bench Verified (500 test instances)",
    "SWE-Gym/SWE-Gym": "SWE-Gym (2,438 training instances, SWE-bench images)",
    "R2E-Gym/R2E-Gym-Lite": "R2E-Gym Lite (rows name their docker_image)",
}


# A pytest node id: a file (with an extension: a text doctest's too), then ``::`` and the names within it.
PYTEST_NODE_ID = re.compile(r"[^\s()]+\.\w+(::.+)?", re.DOTALL)
# How other projects' runners name a test: Django's "test_x (app.tests.TestY)", SymPy's bare "test_x".
_OTHER_RUNNERS = ((re.compile(r".* \([\w.]+\)"), "Django's test runner"), (re.compile(r"\w+"), "SymPy's test runner"))
# The rows whose tests run under their project's own runner, as SWE-bench runs them: Django's (tests/runtests.py)
# and SymPy's (sympy.testing.runtests, which bin/test runs).
DJANGO_REPO = "django/django"
SYMPY_REPO = "sympy/sympy"
# Django's runner names a test "test_x (app.tests.TestY)"; under Python 3.11 and later "test_x (app.tests.TestY.test_x)".
DJANGO_TEST_ID = re.compile(r"(\w+) \(([\w.]+)\)")


_DIFF_PATH = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|\+\+\+ b/(\S+)|--- a/(\S+)|rename (?:from|to) (\S+))", re.MULTILINE)


def patch_paths(patch: str) -> Set[str]:
    """Every path a unified or git diff names in its headers (for the hidden ``test_patch``: ours)."""
    paths: Set[str] = set()
    for match in _DIFF_PATH.finditer(patch):
        paths.update(group for group in match.groups() if group and group != "/dev/null")
    return paths


def runner_of(repo: Any) -> str:
    """The test runner a repository's rows are graded with: ``"django"``, ``"sympy"`` or ``"pytest"``."""
    return {DJANGO_REPO: "django", SYMPY_REPO: "sympy"}.get(repo, "pytest")


def canonical_test_id(test_id: str) -> str:
    """A Django test id in the form the reporter uses (``test_x (app.tests.TestY)``); any other id as it is."""
    match = DJANGO_TEST_ID.fullmatch(test_id)
    if match and match.group(2).endswith("." + match.group(1)):
        return f"{match.group(1)} ({match.group(2)[: -len(match.group(1)) - 1]})"
    return test_id


def django_test_file(test_id: str) -> str:
    """The file of a Django test id (``test_x (app.tests.TestY)`` -> ``tests/app/tests.py``); "" for an id that
    names no module (a docstring's first line)."""
    match = DJANGO_TEST_ID.fullmatch(canonical_test_id(test_id))
    if not match or "." not in match.group(2):
        return ""
    return "tests/" + match.group(2).rsplit(".", 1)[0].replace(".", "/") + ".py"


class SWEInstanceError(DataError):
    """A SWE row is malformed or its environment is broken; the message names the instance and the field."""


@dataclass
class SWEInstance:
    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str
    FAIL_TO_PASS: List[str]
    PASS_TO_PASS: List[str] = field(default_factory=list)
    hints_text: str = ""
    version: str = ""
    image_name: str = ""
    setup_patch: str = ""
    test_cmd: str = ""
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def test_runner(self) -> str:
        """``"django"`` for rows of ``django/django``, ``"sympy"`` for ``sympy/sympy`` (their own runners), else
        ``"pytest"``."""
        return runner_of(self.repo)

    @property
    def test_files(self) -> List[str]:
        """The test files to run: the files of every FAIL_TO_PASS and PASS_TO_PASS test, in order; for Django
        and SymPy, the test modules of the ``test_patch``, as SWE-bench runs them (their ids do not all name a
        file)."""
        seen: Dict[str, None] = {}
        if self.test_runner == "django":
            return sorted(path for path in patch_paths(self.test_patch)
                          if path.startswith("tests/") and path.endswith(".py") and path != "tests/runtests.py")
        if self.test_runner == "sympy":
            return sorted(path for path in patch_paths(self.test_patch)
                          if path.endswith(".py") and path.rsplit("/", 1)[-1].startswith("test_"))
        for test_id in [*self.FAIL_TO_PASS, *self.PASS_TO_PASS]:
            seen.setdefault(test_id.split("::", 1)[0], None)
        return list(seen)

    @property
    def grading_problem(self) -> str:
        """Why the grader cannot grade this row ("" when it can): a test id that is not a pytest node id (outside
        Django's rows)."""
        if self.test_runner != "pytest":
            return ""
        foreign = [test_id for test_id in [*self.FAIL_TO_PASS, *self.PASS_TO_PASS]
                   if not PYTEST_NODE_ID.fullmatch(test_id)]
        if not foreign:
            return ""
        runner = next((name for pattern, name in _OTHER_RUNNERS if pattern.fullmatch(foreign[0])), "")
        return (f"instance {self.instance_id!r} cannot be graded: the grader runs pytest, and {len(foreign)} of its "
                f"{len(self.FAIL_TO_PASS) + len(self.PASS_TO_PASS)} test ids are not pytest node ids "
                f"(path/test_x.py::test_y), e.g. {foreign[0][:120]!r}"
                + (f" (how {runner} names a test)" if runner else ""))

    def to_row(self) -> Dict[str, Any]:
        """The SWE-bench-format row (lists stay lists; SWE-bench's JSON strings are read, never written)."""
        row = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "extra"}
        row.update(self.extra)
        return row


def _test_list(value: Any, instance_id: str, name: str) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):  # SWE-bench stores the lists as JSON text
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise SWEInstanceError(f"instance {instance_id!r}: field {name!r} is a string but not a JSON list") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) and item for item in value):
        raise SWEInstanceError(f"instance {instance_id!r}: field {name!r} must be a list of test ids, got {value!r:.120}")
    return list(value)


def swebench_image_name(instance_id: str, namespace: str = SWEBENCH_NAMESPACE) -> str:
    """SWE-bench's per-instance evaluation image, as published for its rows."""
    return f"{namespace}/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()


def normalize_row(row: Mapping[str, Any], index: Optional[int] = None, namespace: str = SWEBENCH_NAMESPACE) -> SWEInstance:
    """A row from any of the supported sources as a :class:`SWEInstance`; a clear error otherwise."""
    if not isinstance(row, Mapping):
        raise SWEInstanceError(f"row {index}: a SWE instance must be a JSON object, got {type(row).__name__}")
    instance_id = row.get("instance_id")
    where = f"instance {instance_id!r}" if instance_id else f"row {index}"
    missing = [name for name in REQUIRED_FIELDS if row.get(name) in (None, "") and not (name == "test_patch" and "test_patch" in row)]
    if missing:
        raise SWEInstanceError(f"{where} is missing the field(s) {', '.join(missing)} (SWE-bench format)")
    for name in ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch"):
        if not isinstance(row[name], str):
            raise SWEInstanceError(f"{where}: field {name!r} must be a string, got {type(row[name]).__name__}")
    fail_to_pass = _test_list(row.get("FAIL_TO_PASS"), row["instance_id"], "FAIL_TO_PASS")
    if not fail_to_pass:
        raise SWEInstanceError(f"{where}: field 'FAIL_TO_PASS' is empty; an instance needs a test that the fix makes pass")
    image = row.get("image_name") or row.get("docker_image") or swebench_image_name(row["instance_id"], namespace)
    known = set(SWEInstance.__dataclass_fields__) | {"docker_image"}
    return SWEInstance(
        instance_id=row["instance_id"],
        repo=row["repo"],
        base_commit=row["base_commit"],
        problem_statement=row["problem_statement"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=_test_list(row.get("PASS_TO_PASS"), row["instance_id"], "PASS_TO_PASS"),
        hints_text=str(row.get("hints_text") or ""),
        version=str(row.get("version") or ""),
        image_name=str(image),
        setup_patch=str(row.get("setup_patch") or ""),
        test_cmd=str(row.get("test_cmd") or ""),
        extra={k: v for k, v in row.items() if k not in known},
    )


def read_jsonl(path: Union[str, Path]) -> Iterator[Dict[str, Any]]:
    """The JSON objects of a JSONL file; a bad line is an error naming the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise SWEInstanceError(f"{path}:{number}: not a JSON line ({exc.msg})") from None


def load_instances(
    source: Union[str, Path, Iterable[Mapping[str, Any]]],
    split: str = "test",
    limit: Optional[int] = None,
    namespace: str = SWEBENCH_NAMESPACE,
) -> List[SWEInstance]:
    """Instances from a JSONL file, an iterable of rows, or a dataset on the hub (``"princeton-nlp/SWE-bench_Lite"``,
    ``"SWE-Gym/SWE-Gym"``, ``"R2E-Gym/R2E-Gym-Lite"``: needs the ``datasets`` package and the internet)."""
    if isinstance(source, (str, Path)) and Path(source).exists():
        rows: Iterable[Mapping[str, Any]] = read_jsonl(source)
    elif isinstance(source, str) and "/" in source and not source.endswith((".jsonl", ".json")):
        rows = _hub_rows(source, split)
    elif isinstance(source, (str, Path)):
        raise FileNotFoundError(f"no such instances file: {source}")
    else:
        rows = source
    instances = []
    for index, row in enumerate(rows):
        if limit is not None and len(instances) >= limit:
            break
        instances.append(normalize_row(row, index, namespace))
    return instances


def _hub_rows(name: str, split: str) -> Iterable[Mapping[str, Any]]:
    try:
        import datasets
    except ImportError as exc:
        raise ImportError(f"loading {name!r} from the hub needs the datasets package: pip install datasets") from exc
    return datasets.load_dataset(name, split=split)


def write_jsonl(instances: Iterable[SWEInstance], path: Union[str, Path]) -> int:
    """Write instances as SWE-bench rows, atomically; returns how many."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    count = 0
    with partial.open("w", encoding="utf-8") as handle:
        for instance in instances:
            handle.write(json.dumps(instance.to_row(), ensure_ascii=False) + "\n")
            count += 1
    partial.replace(path)
    return count
