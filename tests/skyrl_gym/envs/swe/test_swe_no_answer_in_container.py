"""An attacker inside the agent's container, on every instance of a fresh build: through the env's own bash tool,
search the whole filesystem (compressed files, zip archives and every git object included) for the gold patch's
restored lines and the hidden tests' definitions, and try the `git apply -R` shortcut. Nothing may be found and
the shortcut must score 0 (docs/swe.md, "What the agent's container holds").
"""

from __future__ import annotations

import base64
import json
import re
from typing import Dict, List

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Run by the model's bash tool inside the container: every regular file of the filesystem (but /proc, /sys, /dev),
# decompressed when it is gzip, xz, bzip2, zlib (loose git objects) or a zip archive (wheels, eggs), and every
# object of every git repository on disk (packed ones too), searched for each needle.
SEARCH = r"""
import base64, bz2, glob, gzip, io, json, lzma, os, subprocess, zipfile, zlib
needles = [n.encode() for n in json.loads(base64.b64decode("{needles}"))]
hits = [[] for _ in needles]
scanned = 0
# files the image's Debian packages installed: a hit there is marked, as the Python standard library or a
# package's documentation may hold a common line
owned = set()
for listing in glob.glob("/var/lib/dpkg/info/*.list"):
    with open(listing, errors="replace") as handle:
        owned.update(handle.read().splitlines())

def scan(label, data):
    for index, needle in enumerate(needles):
        if needle in data:
            hits[index].append(("dpkg:" if label.split("!")[0] in owned else "") + label)

def expand(path, data):
    yield path, data
    try:
        if data[:2] == b"\x1f\x8b":
            yield path + "!gunzip", gzip.decompress(data)
        elif data[:6] == b"\xfd7zXZ\x00":
            yield path + "!unxz", lzma.decompress(data)
        elif data[:3] == b"BZh":
            yield path + "!bunzip2", bz2.decompress(data)
        elif data[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                for name in archive.namelist():
                    yield path + "!" + name, archive.read(name)
        elif data[:1] == b"x":
            yield path + "!inflate", zlib.decompress(data)
    except Exception:
        pass

repositories = []
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev") or root.startswith(("/proc/", "/sys/", "/dev/")):
        dirs[:] = []
        continue
    if ".git" in dirs:
        repositories.append(root)
    for name in files:
        path = os.path.join(root, name)
        try:
            if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 64_000_000:
                continue
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        scanned += 1
        for label, blob in expand(path, data):
            scan(label, blob)
for root in repositories:
    objects = subprocess.run(["git", "-C", root, "cat-file", "--batch-all-objects", "--batch"], capture_output=True)
    scan(root + "/.git!objects", objects.stdout)
print(json.dumps({{"scanned": scanned, "repositories": repositories, "hits": hits}}))
"""


def _hunks_new_side(patch: str) -> List[str]:
    """Each hunk of ``patch`` as the text its new side puts in the file (context and added lines)."""
    blocks, current = [], None
    for line in patch.splitlines():
        if line.startswith("@@"):
            current = []
            blocks.append(current)
        elif current is not None and line[:1] in (" ", "+") and not line.startswith("+++"):
            current.append(line[1:])
        elif line.startswith("diff --git"):
            current = None
    return ["\n".join(block) for block in blocks if block]


def _added_lines(patch: str) -> List[str]:
    return [line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]


def hidden_definitions(instance) -> List[str]:
    """For each hidden FAIL_TO_PASS test: its ``def`` line and the line after it, as the test patch adds them."""
    added = _added_lines(instance.test_patch)
    blocks = []
    for test_id in instance.FAIL_TO_PASS:
        name = re.sub(r"\[.*$", "", test_id.split("::")[-1])
        for index, line in enumerate(added[:-1]):
            if re.match(rf"\s*(async\s+)?def {re.escape(name)}\(", line):
                blocks.append(line + "\n" + added[index + 1])
                break
        else:
            raise AssertionError(f"the test patch of {instance.instance_id} does not define {name}")
    return blocks


def _bash(env, command: str) -> str:
    out = env.step(
        json.dumps({"name": "bash", "arguments": {"command": command}}).join(["<tool_call>", "</tool_call>"])
    )
    return out["observations"][0]["content"]


def _search(env, needles: List[str]) -> Dict:
    script = SEARCH.format(needles=base64.b64encode(json.dumps(needles).encode()).decode())
    text = _bash(env, f"python3 - <<'SKYGYM_EOF'\n{script}\nSKYGYM_EOF")
    return json.loads(text.strip().splitlines()[-1])


def test_no_gold_line_or_hidden_test_is_anywhere_in_the_agents_container(swe_instances):
    import skyrl_gym
    from skyrl_gym.envs.swe.dataset import instance_row

    assert swe_instances
    searched_definitions = 0
    for instance in swe_instances:
        row = instance_row(instance)
        definitions = hidden_definitions(instance)
        blocks = _hunks_new_side(instance.patch) + definitions
        # single lines, found in any form (a diff's "+" or "-" lines, a file, an archive)
        lines = {line.strip() for line in _added_lines(instance.patch) if len(line.strip()) >= 12}
        lines |= {definition.splitlines()[0].strip() for definition in definitions}
        env = skyrl_gym.make("swe", env_config={"bash_timeout_s": 600, "output_cap": 200_000}, extras=row)
        env.init(row["prompt"])
        try:
            # lines that the buggy repository itself holds somewhere are no leak: search for the others
            distinctive = [
                line
                for line in sorted(lines)
                if "[exit code 1]" in _bash(env, f"git grep -q -F -e {json.dumps(line)} -- . || exit 1")
            ]
            found = _search(env, blocks + distinctive)
        finally:
            env.close()
        assert found["scanned"] > 1000, found  # the walk saw the whole filesystem, not an empty folder
        assert found["repositories"] == ["/testbed"], found["repositories"]
        for needle, where in zip(blocks, found["hits"]):
            assert where == [], (
                f"{instance.instance_id}: {needle!r} is in {where}"
            )  # anywhere, dpkg's files too
        assert len(found["hits"]) == len(blocks) + len(distinctive)
        for needle, where in zip(distinctive, found["hits"][len(blocks) :]):
            # a file of a Debian package (the standard library, a package's docs) may hold a common line; a copy
            # of the pristine project there would still hold the whole hunk, which the blocks above look for
            outside = [path for path in where if not path.startswith("dpkg:")]
            assert outside == [], f"{instance.instance_id}: the line {needle!r} is in {outside}"
        searched_definitions += sum(line.startswith(("def ", "async def ")) for line in distinctive)
    assert searched_definitions, "no hidden test's def line was searched for"


def test_reversing_every_patch_on_disk_then_submitting_scores_0(swe_instances):
    """The shortcut that scored 1.0: `git apply -R` the set-up patch left in the container, then submit."""
    import skyrl_gym
    from skyrl_gym.envs.swe.dataset import instance_row

    for instance in swe_instances:
        row = instance_row(instance)
        env = skyrl_gym.make("swe", env_config={"bash_timeout_s": 300}, extras=row)
        env.init(row["prompt"])
        try:
            listing = _bash(
                env,
                "ls -a /opt/skygym 2>&1; find / -xdev \\( -name '*.patch' -o -name '*.diff' "
                "-o -name '*.orig' -o -name '*.rej' \\) -not -path '/proc/*' 2>/dev/null",
            )
            assert "No such file or directory" in listing and ".patch" not in listing, listing
            _bash(
                env,
                "for p in $(find / -xdev \\( -name '*.patch' -o -name '*.diff' \\) 2>/dev/null); "
                'do git apply -R "$p" && echo reversed "$p"; done; git apply -R /opt/skygym/setup.patch',
            )
            last = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
        finally:
            env.close()
        assert last["done"] and last["reward"] == 0.0, (
            instance.instance_id,
            last["metadata"]["model_patch"][:500],
        )


def test_no_problem_statement_holds_a_hidden_test_id_a_gold_line_or_a_hidden_path(swe_instances):
    from skyrl_gym.envs.swe.grading import patch_paths

    for instance in swe_instances:
        text = instance.problem_statement
        names = {re.sub(r"\[.*$", "", test_id.split("::")[-1]) for test_id in instance.FAIL_TO_PASS}
        gold = {
            line[1:].strip()
            for line in instance.patch.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---")) and len(line[1:].strip()) >= 8
        }
        for secret in [*instance.FAIL_TO_PASS, *names, *gold, *patch_paths(instance.test_patch)]:
            assert secret not in text, f"{instance.instance_id}: the issue holds {secret!r}:\n{text}"
        assert "```" in text  # a reproduction, not a list of failing tests


def test_a_swebench_style_checkout_keeps_no_later_commit(docker_client_for_tests):
    """Rows without a setup_patch (SWE-bench images) check out base_commit in a clone whose history may hold the
    fix: before the agent's first call the repository holds base_commit alone. The clone here is a partial one
    (blobs fetched as needed), whose pack of fetched objects no `git gc` prunes: dropping the refs and the
    unreachable objects, as set-up once did, left the fix's commit and its file's text readable."""
    from skygym_sandboxes.containers import Container

    from skyrl_gym.envs.swe.instances import SWEInstance
    from skyrl_gym.envs.swe.runtime import COMMIT_ENV, SWERuntime
    from skyrl_gym.envs.swe.synth.builder import base_image

    client = docker_client_for_tests
    script = (
        "set -e; mkdir -p /src && cd /src && git init -q && printf 'def add(a, b):\\n    return a - b\\n' > calc.py"
        " && git add -A && git commit -q -m bug && git rev-parse HEAD > /base"
        " && printf 'def add(a, b):\\n    return a + b  # FIXED-LINE\\n' > calc.py && git commit -qam fix"
        " && git rev-parse HEAD > /fix && git tag v-fixed && git config uploadpack.allowFilter true"
        " && git clone -q --filter=blob:none file:///src /testbed && cd /testbed && git checkout -q $(cat /base)"
        " && git checkout -q master && git checkout -q -b feature && rm -rf /src"  # both versions' files fetched
    )
    with Container(base_image(client), client=client, kind="swe-build") as box:
        assert box.exec(script, env=COMMIT_ENV).ok
        base, fix = (box.read_file(name).decode().strip() for name in ("/base", "/fix"))
        promisor = box.exec("ls /testbed/.git/objects/pack/*.promisor && grep -c FIXED-LINE /testbed/calc.py")
        assert promisor.ok, promisor.output  # a partial clone, the fix checked out (its blob fetched)
        image = box.commit("skyrl-gym-swe-test-history", "v1")
    try:
        instance = SWEInstance(
            "org__calc-1",
            "org/calc",
            base,
            "add subtracts",
            "",
            "",
            ["test_calc.py::test_add"],
            image_name=image,
        )
        with SWERuntime(instance, client=client) as runtime:
            runtime.setup()
            objects = runtime.exec("git cat-file --batch-all-objects --batch").output
            refs = runtime.exec("git for-each-ref; git reflog; git log --all --format=%H").output.split()
            fix_commit = runtime.exec(f"git cat-file -e {fix}")
            clean = runtime.exec("git status --porcelain").output
        assert "FIXED-LINE" not in objects and "return a - b" in objects and fix_commit.exit_code != 0
        assert refs == [base], refs
        assert clean == "", clean
    finally:
        client.images.remove(image, force=True)
