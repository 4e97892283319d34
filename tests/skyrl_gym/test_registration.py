"""The registry: register, make, spec, versions, plugins, and the errors users see."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv, EnvSpec, StepOutput
from skyrl_gym.errors import EnvCreationError, RegistrationError, UnregisteredEnv


class EchoEnv(BaseTextEnv):
    """Echo env used by the registry tests."""

    def __init__(self, env_config=None, extras=None, greeting="hi"):
        super().__init__(env_config, extras)
        self.greeting = greeting

    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[{"role": "user", "content": self.greeting + action}], reward=0.0, done=True, metadata={})


@pytest.fixture
def temp_ids():
    created = []

    def _register(env_id, *args, **kwargs):
        created.append(env_id)
        return skyrl_gym.register(env_id, *args, **kwargs)

    yield _register
    for env_id in created:
        if dict.__contains__(skyrl_gym.registry, env_id):
            skyrl_gym.deregister(env_id)


def test_builtin_envs_are_registered():
    for env_id in ["gsm8k", "gsm8k_multi_turn", "aime", "math", "multiply"]:
        assert env_id in skyrl_gym.registry
        assert skyrl_gym.spec(env_id).provider == "skyrl-gym"


def test_make_with_callable_and_string_entry_points(temp_ids):
    temp_ids("echo-callable", entry_point=EchoEnv)
    temp_ids("echo-string", entry_point=f"{__name__}:EchoEnv")
    for env_id in ("echo-callable", "echo-string"):
        env = skyrl_gym.make(env_id)
        assert isinstance(env, EchoEnv)
        assert env.spec.id == env_id


def test_make_merges_deep_copies_of_spec_kwargs(temp_ids):
    shared_config = {"nested": {"value": 1}}
    temp_ids("echo-kwargs", entry_point=EchoEnv, kwargs={"env_config": shared_config, "greeting": "hello "})
    env = skyrl_gym.make("echo-kwargs", greeting="hey ")
    assert env.greeting == "hey "  # make's own kwargs win
    env.env_config["nested"]["value"] = 99  # mutating one env's config must not leak into the spec
    assert skyrl_gym.spec("echo-kwargs").kwargs["env_config"]["nested"]["value"] == 1
    assert skyrl_gym.make("echo-kwargs").env_config["nested"]["value"] == 1


def test_duplicate_id_is_refused(temp_ids):
    temp_ids("echo-dup", entry_point=EchoEnv)
    with pytest.raises(RegistrationError, match="'echo-dup' is already registered"):
        skyrl_gym.register("echo-dup", entry_point=EchoEnv)


def test_unknown_id_suggests_close_matches():
    with pytest.raises(UnregisteredEnv, match="Did you mean: 'gsm8k'"):
        skyrl_gym.make("gsm8kk")


def test_a_package_installed_without_its_env_entry_point_is_told_to_declare_it(tmp_path, monkeypatch):
    """A contributor's cold run: an env entry point left out of pyproject.toml was answered "not installed", and
    `pip install -e` again changed nothing."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    # its dataset builder registered, its env not: the builder's package is named
    write_distribution(site, "skyrl-gym-probe-builder-only", "[skyrl_gym.datasets]\nprobe_builder_only = p.dataset:build_rows\n")
    with pytest.raises(UnregisteredEnv) as refused:
        skyrl_gym.make("probe_builder_only")
    message = str(refused.value)
    assert ("skyrl-gym-probe-builder-only is installed with a dataset builder 'probe_builder_only' but no env of that "
            "id: declare it in its pyproject.toml ([project.entry-points.\"skyrl_gym.envs\"] probe_builder_only = "
            "\"module:EnvClass\"), then pip install -e it again") in message
    assert "not installed" not in message
    # the package `skyrl-gym init` wrote in this folder, installed, with no entry point at all: not "not installed"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "skyrl-gym-probe-no-entry").mkdir()
    (tmp_path / "skyrl-gym-probe-no-entry" / "pyproject.toml").write_text("[project]\nname = 'skyrl-gym-probe-no-entry'\n")
    write_distribution(site, "skyrl-gym-probe-no-entry", "")
    with pytest.raises(UnregisteredEnv, match=r"\./skyrl-gym-probe-no-entry holds its package, installed without an env "
                                              "'probe_no_entry': declare it in its pyproject.toml"):
        skyrl_gym.make("probe_no_entry")


def test_an_id_in_the_wrong_case_is_not_made_but_suggests_the_right_one():
    with pytest.raises(UnregisteredEnv, match="Did you mean: 'gsm8k'"):
        skyrl_gym.make("GSM8K")
    with pytest.raises(UnregisteredEnv, match="Did you mean: 'multiply'"):
        skyrl_gym.make("Multiply")


def test_an_entry_point_in_a_misspelt_group_is_named(tmp_path, monkeypatch):
    """A cold run: `[project.entry-points."skyrl_gym.env"]` (no s) said only "no env registered"."""
    info = tmp_path / "probe_misgrouped-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-misgrouped\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[skyrl_gym.env]\nprobe_misgrouped = probe_pkg.env:ProbeEnv\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnregisteredEnv, match="An entry point 'probe_misgrouped' of probe-misgrouped is in the "
                                              "group 'skyrl_gym.env'; envs are read from 'skyrl_gym.envs'"):
        skyrl_gym.make("probe_misgrouped")
    # this package's other groups are not misspellings: 'dense' is a retriever, and no advice names it (a review)
    with pytest.raises(UnregisteredEnv) as refused:
        skyrl_gym.make("dense")
    assert "An entry point" not in str(refused.value)


def test_unregistered_ids_names_only_the_unknown_ones_with_their_close_matches():
    from skyrl_gym.registration import unregistered_ids

    problems = unregistered_ids(["gsm8k", "gsm8kk", "multiply", "multiplyy"])
    assert list(problems) == ["gsm8kk", "multiplyy"]
    assert "Did you mean: 'gsm8k'" in problems["gsm8kk"] and "'multiply'" in problems["multiplyy"]
    assert unregistered_ids(["gsm8k"]) == {}


def test_entry_point_returning_a_non_env_names_the_id(temp_ids):
    temp_ids("not-an-env", entry_point=lambda **kw: object())
    with pytest.raises(EnvCreationError, match="'not-an-env'.*not a skyrl_gym.Env"):
        skyrl_gym.make("not-an-env")


def test_bad_entry_point_strings_are_clear(temp_ids):
    with pytest.raises(RegistrationError, match="module:Attr"):
        skyrl_gym.register("bad-ep", entry_point="no_colon_here")
    temp_ids("missing-module", entry_point="no_such_module_xyz:Env")
    with pytest.raises(EnvCreationError, match="cannot import module 'no_such_module_xyz' for env 'missing-module'"):
        skyrl_gym.make("missing-module")


def test_unversioned_id_resolves_to_latest_version(temp_ids):
    temp_ids("versioned-v0", entry_point=EchoEnv, kwargs={"greeting": "v0"})
    temp_ids("versioned-v2", entry_point=EchoEnv, kwargs={"greeting": "v2"})
    temp_ids("versioned-v1", entry_point=EchoEnv, kwargs={"greeting": "v1"})
    assert skyrl_gym.make("versioned").greeting == "v2"
    assert skyrl_gym.make("versioned-v1").greeting == "v1"
    assert skyrl_gym.spec("versioned").version == 2


def test_an_id_with_a_version_of_thousands_of_digits_is_not_registered():
    """int() refused the 5000-digit version with ValueError, which serve-env answered as a 500 (its own
    fault)."""
    with pytest.raises(UnregisteredEnv):
        skyrl_gym.spec("gsm8k-v" + "1" * 5000)


def test_env_spec_json_round_trip(temp_ids):
    original = temp_ids("echo-json", entry_point=f"{__name__}:EchoEnv", kwargs={"greeting": "yo"}, description="d")
    restored = EnvSpec.from_json(original.to_json())
    assert restored == original
    callable_spec = EnvSpec("echo-callable-json", entry_point=EchoEnv)
    assert json.loads(callable_spec.to_json())["entry_point"] == f"{__name__}:EchoEnv"


def test_pprint_registry_lists_builtins():
    text = skyrl_gym.pprint_registry(print_output=False)
    assert "skyrl-gym" in text and "gsm8k_multi_turn" in text


def write_distribution(folder, name, entry_points):
    """An installed distribution ``name`` in ``folder`` (its dist-info), declaring ``entry_points``."""
    dist_info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(entry_points)


def run_beside(folder, script):
    """``script``'s output in a fresh interpreter that sees ``folder`` (its distributions) and this skyrl_gym."""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": f"{folder}:{skyrl_gym.__path__[0]}/.."})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_entry_point_plugin_is_discovered_lazily_in_a_fresh_process(tmp_path):
    """A package that declares the `skyrl_gym.envs` entry point works in any process, no import needed."""
    package = tmp_path / "hello_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "env.py").write_text(
        textwrap.dedent(
            """
            from skyrl_gym import BaseTextEnv
            IMPORTED = True

            class HelloEnv(BaseTextEnv):
                '''Says hello.'''
                def step(self, action):
                    return {"observations": [], "reward": float(action == "hello"), "done": True, "metadata": {}}
            """
        )
    )
    write_distribution(tmp_path, "hello-plugin", "[skyrl_gym.envs]\nhello = hello_plugin.env:HelloEnv\n")
    script = textwrap.dedent(
        """
        import sys, skyrl_gym
        assert "hello_plugin.env" not in sys.modules  # discovery imports nothing
        spec = skyrl_gym.spec("hello")
        assert "hello_plugin.env" not in sys.modules
        env = skyrl_gym.make("hello")
        print(spec.provider, env.step("hello")["reward"])
        """
    )
    assert run_beside(tmp_path, script).split() == ["hello-plugin", "1.0"]


def test_a_wrong_entry_point_a_package_declares_says_where_to_fix_it(tmp_path):
    """The class or module an installed package's entry point names is missing: the error says the fix is in that
    package's pyproject.toml and takes a reinstall (a cold run fixed the code and ran check again)."""
    package = tmp_path / "typo_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "env.py").write_text("from skyrl_gym import BaseTextEnv\nclass TypoEnv(BaseTextEnv):\n    pass\n")
    write_distribution(tmp_path, "typo-plugin", "[skyrl_gym.envs]\ntypo = typo_plugin.env:Typo\n")
    script = textwrap.dedent(
        """
        import skyrl_gym, skyrl_gym.errors
        try:
            skyrl_gym.make("typo")
        except skyrl_gym.errors.EnvCreationError as exc:
            print(exc)
        """
    )
    said = run_beside(tmp_path, script)
    assert "module 'typo_plugin.env' has no attribute 'Typo' for env 'typo' (did you mean 'TypoEnv'?)" in said
    assert "package 'typo-plugin' declares: fix it under [project.entry-points.\"skyrl_gym.envs\"]" in said
    assert "pip install -e it again" in said


def test_import_is_light():
    """`import skyrl_gym` must not import torch, transformers, ray or pandas."""
    script = "import sys, skyrl_gym; print(sorted(m for m in ('torch','transformers','ray','pandas','numpy') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": f"{skyrl_gym.__path__[0]}/.."})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_string_entry_point_is_loaded_once_and_again_when_it_changes():
    from skyrl_gym.envs.gsm8k.env import GSM8kEnv
    from skyrl_gym.envs.multiply.env import MultiplyEnv

    spec = skyrl_gym.register(id="test_cached_entry_point", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
    try:
        row = {"reward_spec": {"ground_truth": "4"}}
        assert type(skyrl_gym.make("test_cached_entry_point", extras=row)) is GSM8kEnv
        assert spec.load_entry_point() is spec.load_entry_point() is GSM8kEnv
        spec.entry_point = "skyrl_gym.envs.multiply.env:MultiplyEnv"
        assert type(skyrl_gym.make("test_cached_entry_point", extras=row)) is MultiplyEnv
        assert skyrl_gym.EnvSpec.from_json(spec.to_json()) == spec  # the cache is not part of the spec
    finally:
        skyrl_gym.deregister("test_cached_entry_point")


_MAKE_FROM_THREADS = """
import sys, threading, skyrl_gym
assert not skyrl_gym.registry._plugins_loaded  # a fresh process: nothing has read the entry points yet
barrier = threading.Barrier(64)
failures = []

def make_one():
    barrier.wait()
    try:
        row = {"reward_spec": {"ground_truth": {"target": 3, "numbers": [1, 2]}}}
        env = skyrl_gym.make("countdown", extras=row)  # an entry-point env (skygym_contrib declares it)
        assert type(env).__name__ == "CountdownEnv", type(env)
    except Exception as exc:
        failures.append(f"{type(exc).__name__}: {exc}")

threads = [threading.Thread(target=make_one) for _ in range(64)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(failures), failures[:3])
"""


def test_64_threads_making_an_entry_point_env_at_once_all_succeed():
    """Threads that look up the registry while another is still reading the entry points wait for it, instead of
    seeing an empty registry (`skyrl-gym eval` on an entry-point env errored 15 of 16 episodes)."""
    result = subprocess.run([sys.executable, "-c", _MAKE_FROM_THREADS], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0 []"


def test_a_plugin_module_that_looks_up_the_registry_while_loading_does_not_deadlock(tmp_path):
    """A module plugin that reads the registry (or makes an env) at import runs in the loading thread: it sees
    what is registered so far instead of waiting for itself."""
    (tmp_path / "lookup_plugin.py").write_text(
        textwrap.dedent(
            """
            import skyrl_gym
            skyrl_gym.register("lookup_plugin_env", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
            SEEN = "gsm8k" in skyrl_gym.registry and "lookup_plugin_env" in skyrl_gym.registry
            """
        )
    )
    write_distribution(tmp_path, "lookup-plugin", "[skyrl_gym.envs]\nlookup = lookup_plugin\n")
    script = "import skyrl_gym, sys; skyrl_gym.spec('lookup_plugin_env'); print(sys.modules['lookup_plugin'].SEEN)"
    assert run_beside(tmp_path, script).strip() == "True"


FIRST_LOADS_AT_ONCE = """
import threading
from skyrl_gym.registration import registry, spec

ids = sorted(registry)[:40]
barrier = threading.Barrier(len(ids))
errors = []

def load(env_id):
    barrier.wait()
    try:
        spec(env_id).load_entry_point()
    except Exception as exc:
        errors.append(f"{env_id}: {type(exc).__name__}: {exc}")

threads = [threading.Thread(target=load, args=(env_id,)) for env_id in ids]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(errors)
"""


def test_many_threads_loading_envs_for_the_first_time_at_once_all_load():
    """Two envs' first load in two threads, each reaching skyrl_gym.rewards, made Python 3.11's import locks report a
    deadlock (`_DeadlockError`) in one of them: seen in a Ray env worker building its first sessions on its threads,
    and in 4 of 5 fresh processes loading 40 envs at once. Env modules are now imported one thread at a time."""
    for _ in range(3):  # a fresh process each time: the race is in the first import
        done = subprocess.run([sys.executable, "-c", FIRST_LOADS_AT_ONCE], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "[]", done.stdout[-2000:]


def test_a_huge_id_is_refused_at_once_with_a_short_message(monkeypatch):
    """serve-env looks up a client's env id on its event loop: a 30 MB id spent three seconds searching for close
    spellings (every client waited) and came back whole in the 404 (an attacker's pass)."""
    import difflib

    from skyrl_gym.errors import UnregisteredEnv
    from skyrl_gym.registration import MAX_ID_CHARS, spec

    monkeypatch.setattr(difflib, "get_close_matches", lambda *a, **k: pytest.fail("searched for spellings"))
    with pytest.raises(UnregisteredEnv, match=rf"'aaaa.*\.\.\. \(1,000,000 characters; ids are at most {MAX_ID_CHARS}\)"
                       ) as raised:
        spec("a" * 1_000_000)
    assert len(str(raised.value)) < 300


def test_a_declared_entry_point_that_did_not_load_is_not_told_to_declare_it(tmp_path):
    """A review: an env declared as a module to import, whose import failed, was told to declare it."""
    write_distribution(tmp_path, "probe-fails-to-load", "[skyrl_gym.envs]\nprobe_fails = probe_absent_module_xyz\n")
    script = ("import skyrl_gym\n"
              "try:\n    skyrl_gym.make('probe_fails')\n"
              "except skyrl_gym.UnregisteredEnv as exc:\n    print(exc)\n")
    said = run_beside(tmp_path, script)
    assert ("probe-fails-to-load declares it (probe_absent_module_xyz), but it did not load: ModuleNotFoundError: "
            "No module named 'probe_absent_module_xyz'") in said, said
    assert "declare it in" not in said


def test_a_misspelt_keyword_to_make_gets_the_close_name():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'extra'.*; did you mean 'extras'\?"):
        skyrl_gym.make("gsm8k", extra={"reward_spec": {"ground_truth": "1"}})
    with pytest.raises(TypeError) as refused:
        skyrl_gym.make("gsm8k", unrelated=1)
    assert "did you mean" not in str(refused.value)
